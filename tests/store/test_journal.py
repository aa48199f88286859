"""EpisodeJournal: every finished episode persisted once per (step, key), durable, safe across threads."""

from __future__ import annotations

import math
import subprocess
import sys
import threading
from pathlib import Path

from rllm.store.journal import EpisodeJournal
from rllm.types import Episode, Step, TerminationReason, Trajectory


def _episode(task_id: str = "t0", reward: float = 1.0) -> Episode:
    step = Step(
        prompt_ids=[1, 2],
        response_ids=[3, 4],
        logprobs=[-0.1234567890123, float("-inf")],
        response_mask=[1, 0],
        messages=[{"role": "user", "content": "hi"}],
        weight_version=3,
    )
    return Episode(
        task_id=task_id,
        task={"task_id": task_id, "question": "q"},
        trajectories=[Trajectory(name="solver", steps=[step], reward=reward)],
        reward=reward,
        termination_reason=TerminationReason.MAX_RESPONSE_LENGTH,
        metrics={"episode_time_s": 0.5},
    )


def test_record_is_once_per_key_and_round_trips_exactly(tmp_path: Path) -> None:
    with EpisodeJournal(tmp_path / "journal.db") as journal:
        first, second = _episode(reward=1.0), _episode(reward=0.0)
        assert journal.record(0, "r0:0", first) is True
        assert journal.record(0, "r0:0", second) is False  # the first one recorded stays
        assert journal.record(1, "r0:0", second) is True  # another step, another job
        got = journal.episodes(0)
        assert list(got) == ["r0:0"]
        assert got["r0:0"] == first  # every field, the -inf logprob and the float bits included
        assert math.isinf(got["r0:0"].trajectories[0].steps[0].logprobs[1])
        assert journal.episodes(2) == {}
        assert journal.steps() == [0, 1]


def test_batches_are_replaced_by_a_redone_step(tmp_path: Path) -> None:
    with EpisodeJournal(tmp_path / "journal.db") as journal:
        assert journal.batch(0) is None
        journal.record_batch(0, {"digest": "a", "loss": float("nan")})
        journal.record_batch(0, {"digest": "b", "loss": 0.5})
        journal.record_batch(3, {"digest": "c"})
        assert journal.batch(0) == {"digest": "b", "loss": 0.5}
        assert journal.steps() == [0, 3]
        journal.clear()
        assert journal.steps() == [] and journal.batch(0) is None


def test_recorded_rows_survive_a_killed_writer(tmp_path: Path) -> None:
    """A process that records, then dies by SIGKILL without closing: what record returned is on disk."""
    path = tmp_path / "journal.db"
    script = (
        "import os, signal, sys\n"
        "from rllm.store.journal import EpisodeJournal\n"
        "from rllm.types import Episode\n"
        "j = EpisodeJournal(sys.argv[1])\n"
        "for i in range(5): j.record(7, f'r0:{i}', Episode(task_id=f't{i}'))\n"
        "j.record_batch(7, {'keys': ['r0:0']})\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script, str(path)], check=False)
    assert proc.returncode == -9
    with EpisodeJournal(path) as journal:
        assert sorted(journal.episodes(7)) == [f"r0:{i}" for i in range(5)]
        assert journal.batch(7) == {"keys": ["r0:0"]}


def test_records_from_many_threads_beside_batch_writes(tmp_path: Path) -> None:
    journal = EpisodeJournal(tmp_path / "journal.db")
    stored: list[bool] = []
    errors: list[BaseException] = []

    def recorder(worker: int) -> None:
        try:
            for i in range(40):  # every worker records the same 40 keys: each is stored exactly once
                stored.append(journal.record(0, f"r0:{i}", _episode(f"t{i}")))
        except BaseException as exc:  # noqa: BLE001 — reported below
            errors.append(exc)

    threads = [threading.Thread(target=recorder, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for s in range(40):  # the main thread writes batches meanwhile
        journal.record_batch(s, {"step": s})
    for t in threads:
        t.join()
    assert not errors
    assert sum(stored) == 40 and len(stored) == 160
    assert sorted(journal.episodes(0)) == sorted(f"r0:{i}" for i in range(40))
    assert journal.batch(39) == {"step": 39}
    journal.close()
    journal.close()  # twice is fine
