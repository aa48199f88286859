"""``rllm replay`` on a real tiny run: every recorded step's batch prepared again from the journal equals the
record exactly, and with the step's checkpoint so do the loss and gradient norm; a tampered journal row is
named; a bundle replays from another directory, and a checkpoint that is not the recorded one is refused."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
import resume_job

from rllm.cli.main import main
from rllm.store.journal import EpisodeJournal


@pytest.fixture(scope="module")
def run(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The resume test's job (4 steps, checkpoints after steps 2 and 4), run once, uninterrupted."""
    runs = tmp_path_factory.mktemp("replay")
    resume_job.run(str(tiny_model_dir), str(runs))
    return runs / "job"


def _replay(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["replay", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out + out.err


def test_every_recorded_step_replays_equal_and_the_checkpointed_one_to_the_bit(
    run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = _replay(capsys, run)
    assert code == 0, out
    assert out.count(": equal") == 4 and "4 of 4 step(s) equal" in out
    # Step 2 starts from checkpoint step_000002: its loss and grad norm are recomputed, to the bit here.
    assert "loss: recorded" in out and "grad_norm: recorded" in out
    assert out.count("(bit for bit)") == 2, out
    assert "loss and grad norm not checked: no checkpoint step_000000" in out


def test_a_run_is_found_by_its_name_in_the_run_store(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _replay(capsys, "job", "--store", run.parent / "rllm.db", "--step", 1)
    assert code == 0, out
    assert "step 1 (logged as 2): 8 episodes" in out and ": equal" in out
    code, out = _replay(capsys, "no-such-run", "--store", run.parent / "rllm.db")
    assert code == 2 and "no train run with id or name 'no-such-run'" in out


def test_a_tampered_journal_row_is_named(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "job"
    shutil.copytree(run, copy)
    with EpisodeJournal(copy / "journal.db") as journal:
        keys = journal.batch(1)["keys"]
    conn = sqlite3.connect(copy / "journal.db")
    (text,) = conn.execute("SELECT episode FROM episodes WHERE step = 1 AND key = ?", (keys[0],)).fetchone()
    episode = json.loads(text)
    episode["trajectories"][0]["steps"][0]["logprobs"][0] += 1e-9  # one sampled logprob, off by a hair
    conn.execute("UPDATE episodes SET episode = ? WHERE step = 1 AND key = ?", (json.dumps(episode), keys[0]))
    conn.commit()
    conn.close()
    code, out = _replay(capsys, copy)
    assert code == 1, out
    assert "step 1 (logged as 2)" in out and "DIFFERS in digests.rollout_logprobs" in out
    assert "3 of 4 step(s) equal" in out


def test_a_bundle_replays_from_another_directory(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = tmp_path / "out" / "step2.tar.gz"
    code, out = _replay(capsys, run, "--step", 2, "--bundle", bundle)
    assert code == 0 and "checkpoint hash for step(s) 2" in out, out
    # Elsewhere: the bundle and a copy of the checkpoint, nothing of the run directory.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copy(bundle, elsewhere / "b.tar.gz")
    shutil.copytree(run / "checkpoints" / "step_000002", elsewhere / "ckpt")
    monkeypatch.chdir(elsewhere)
    code, out = _replay(capsys, "b.tar.gz")
    assert code == 0 and ": equal" in out and "not checked" in out, out
    code, out = _replay(capsys, "b.tar.gz", "--checkpoint", "ckpt")
    assert code == 0 and "(bit for bit)" in out, out
    # A checkpoint whose bytes differ from the recorded one's is refused, before anything is computed.
    state = elsewhere / "ckpt" / "loop_state.json"
    state.write_text(state.read_text() + " ")
    code, out = _replay(capsys, "b.tar.gz", "--checkpoint", "ckpt")
    assert code == 2 and "is not the checkpoint step 2 started from: its sha256" in out, out
