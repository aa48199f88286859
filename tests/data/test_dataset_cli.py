"""``rllm dataset``: run in-process through ``rllm.cli.main.main``, and once as a real subprocess."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rllm.cli.main import main
from rllm.data.catalog import CATALOG, FAMILIES
from rllm.data.registry import DatasetRegistry, builtin_datasets


@pytest.fixture(autouse=True)
def datasets_dir(tmp_path: Path, monkeypatch) -> Path:
    root = tmp_path / "datasets"
    monkeypatch.setenv("RLLM_DATASETS_DIR", str(root))
    return root


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["dataset", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_list_shows_builtin_local_and_catalog(capsys, tmp_path: Path) -> None:
    path = tmp_path / "mine.jsonl"
    path.write_text(json.dumps({"question": "1+1?", "answer": "2"}) + "\n")
    assert run(capsys, "register", "gsm8k", str(path), "--split", "test", "--reward", "math")[0] == 0
    code, out, _ = run(capsys, "list", "--tsv")
    assert code == 0
    lines = {line.split("\t")[0]: line.split("\t") for line in out.splitlines()}
    assert set(lines) == set(builtin_datasets()) | set(CATALOG)
    assert all(len(line) == 8 for line in lines.values())
    assert lines["add"][1:4] == ["built-in", "number", "train/test (generated)"]
    assert lines["larger"][1:4] == ["built-in", "number", "train/test (generated)"]
    assert lines["code_problems"][1:4] == ["built-in", "code", "train=16 test=6"]
    assert lines["frozenlake"][1:3] == ["built-in", "-"]
    assert lines["countdown"][1:3] == ["built-in", "countdown"]
    assert lines["gsm8k"][1:7] == ["local", "math", "test=1", "test=1", "mit", "math"]  # registered by hand
    assert lines["math500"][1:7] == ["catalog (not pulled)", "math", "test", "test=500", "unknown", "math"]
    assert lines["mmlu-pro"][2] == "multiple_choice" and "TIGER-Lab/MMLU-Pro" in lines["mmlu-pro"][7]
    assert lines["finqa"][2:7] == [
        "finance_number",
        "train/validation/test",
        "train=6,251 validation=883 test=1,147",
        "unknown",
        "finance",
    ]


def test_list_groups_the_catalog_by_family_in_columns(capsys) -> None:
    code, out, _ = run(capsys, "list")
    assert code == 0
    sections = [line for line in out.splitlines() if line and not line.startswith(" ")]
    assert sections[0].startswith("registered (")
    assert [s.split(" (")[0] for s in sections[1:-1]] == [f"catalog: {family}" for family in FAMILIES]
    row = next(line for line in out.splitlines() if line.strip().startswith("gsm8k "))
    assert row.split()[:6] == ["gsm8k", "math", "train=7,473", "test=1,319", "mit", "-"]
    header = next(line for line in out.splitlines() if "rows (hub card)" in line)
    assert header.index("licence") == row.index("mit")  # aligned columns
    code, out, _ = run(capsys, "list", "--family", "agent")
    assert code == 0 and "registered" not in out and "catalog: math" not in out
    row = next(line for line in out.splitlines() if line.strip().startswith("xlam-function-calling"))
    assert row.split()[:5] == ["xlam-function-calling", "tool_call", "train=60,000", "cc-by-4.0", "-"]
    code, out, _ = run(capsys, "list", "--family", "agent", "--tsv")
    assert [line.split("\t")[0] for line in out.splitlines()] == ["xlam-function-calling"]
    code, _, err = run(capsys, "list", "--family", "finanse")
    assert code == 1 and err.strip() == "error: unknown family 'finanse' — did you mean 'finance'?"


def test_register_inspect_remove(capsys, tmp_path: Path, datasets_dir: Path) -> None:
    path = tmp_path / "qa.csv"
    path.write_text("q,a,level\nWho wrote Hamlet?,Shakespeare,1\nCapital of France?,Paris,2\n")
    code, out, _ = run(
        capsys,
        "register",
        "trivia",
        str(path),
        "--split",
        "test",
        "--reward",
        "exact_match",
        "--question-key",
        "q",
        "--answer-key",
        "a",
        "--description",
        "two questions",
    )
    assert code == 0 and out.strip() == f"trivia: test=2 -> {datasets_dir / 'trivia'}"
    rows = DatasetRegistry().load("trivia", "test")
    assert rows[1] == {
        "task_id": "trivia-test-1",
        "question": "Capital of France?",
        "ground_truth": "Paris",
        "data_source": "trivia",
        "metadata": {"level": "2"},
    }

    code, out, _ = run(capsys, "inspect", "trivia", "-n", "1")
    assert code == 0
    assert "trivia (local) reward=exact_match splits: test=2" in out and "two questions" in out
    assert "Who wrote Hamlet?" in out and "Shakespeare" in out and "Capital of France?" not in out

    code, out, _ = run(capsys, "remove", "trivia")
    assert (code, out.strip()) == (0, "removed trivia") and not DatasetRegistry().exists("trivia")
    code, _, err = run(capsys, "remove", "trivia")
    assert code == 1 and err.startswith("error: no registered dataset 'trivia'")


def test_inspect_builtin_and_errors(capsys) -> None:
    code, out, _ = run(capsys, "inspect", "code_problems", "--split", "test", "-n", "2")
    assert code == 0 and "code_problems-merge_intervals" in out and "code_problems-roman_to_int" in out
    code, _, err = run(capsys, "inspect", "gsm8k")
    assert code == 1 and "in the catalog but not pulled yet: run `rllm dataset pull gsm8k`" in err
    code, _, err = run(capsys, "inspect", "larger", "--split", "dev")
    assert code == 1 and "no split 'dev': it has train, test" in err


def test_register_errors(capsys, tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"prompt_text": "q", "label": "a"}) + "\n")
    code, _, err = run(capsys, "register", "d", str(path))
    assert code == 1 and "name it with --question-key" in err
    code, _, err = run(
        capsys,
        "register",
        "d",
        str(path),
        "--question-key",
        "prompt_text",
        "--answer-key",
        "label",
        "--reward",
        "nope",
    )
    assert code == 1 and "unknown reward 'nope'" in err
    code, _, err = run(
        capsys, "register", "add", str(path), "--question-key", "prompt_text", "--answer-key", "label"
    )
    assert code == 1 and "'add' is a built-in dataset" in err


def test_pull(capsys, monkeypatch, tmp_path: Path, datasets_dir: Path) -> None:
    import datasets

    def offline(path, name=None, split=None, **kwargs):
        raise ConnectionError(f"Couldn't reach '{path}' on the Hub (OfflineModeIsEnabled)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    code, _, err = run(capsys, "pull", "math500")
    assert (
        code == 1
        and "the Hugging Face hub is unreachable" in err
        and "rllm dataset register math500 FILE" in err
    )
    code, _, err = run(capsys, "pull", "add")
    assert code == 0 and "add is built-in" in err
    code, _, err = run(capsys, "pull", "xyzzy")
    assert code == 1 and err.startswith(
        "error: 'xyzzy' is not in the catalog: `rllm dataset list` shows its "
    )
    code, _, err = run(capsys, "pull", "math500", "--file", "oops")
    assert code == 1 and "--file takes SPLIT=PATH" in err

    path = tmp_path / "test.jsonl"
    path.write_text(
        json.dumps(
            {
                "problem": "What is $1+1$?",
                "solution": "$\\boxed{2}$",
                "answer": "2",
                "subject": "Prealgebra",
                "level": 1,
                "unique_id": "test/prealgebra/1.json",
            }
        )
        + "\n"
    )
    code, out, _ = run(capsys, "pull", "math500", "--file", f"test={path}")
    assert code == 0 and out.strip() == f"math500: test=1 -> {datasets_dir / 'math500'}"
    assert DatasetRegistry().load("math500", "test")[0]["task_id"] == "test/prealgebra/1.json"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_pull_from_an_unreachable_hub_fails_fast(capsys, monkeypatch) -> None:
    """No network and no HF_HUB_OFFLINE: the reachability probe answers in well under a second, instead of
    ``datasets`` retrying with back-off for half a minute; ``datasets`` is never asked."""
    import datasets

    def never(*args, **kwargs):
        raise AssertionError("load_dataset must not be called when the hub is unreachable")

    monkeypatch.setattr(datasets, "load_dataset", never)
    for var in (
        "HF_HUB_OFFLINE",
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "ALL_PROXY",
        "all_proxy",
    ):
        monkeypatch.delenv(var, raising=False)
    port = _closed_port()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    started = time.monotonic()
    code, _, err = run(capsys, "pull", "gpqa-diamond")
    assert code == 1 and time.monotonic() - started < 5
    assert f"the Hugging Face hub is unreachable from this machine (cannot connect to 127.0.0.1:{port}" in err
    assert "set HF_HUB_OFFLINE=1 to read it from there" in err
    assert "rllm dataset pull gpqa-diamond --file test=PATH" in err and "Gated on the hub" in err
    assert "rllm dataset register gpqa-diamond FILE --split test" in err
    assert not DatasetRegistry().exists("gpqa-diamond")
    # Behind a proxy the direct probe proves nothing: it is skipped and `datasets` decides.
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:1")
    code, _, err = run(capsys, "pull", "gpqa-diamond")
    assert code == 1 and "load_dataset must not be called" in err


def test_pull_offline_in_a_subprocess(tmp_path: Path) -> None:
    """The installed entry point end to end, with the real ``datasets`` offline (HF_HUB_OFFLINE=1)."""
    env = {
        **os.environ,
        "RLLM_DATASETS_DIR": str(tmp_path / "datasets"),
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf"),
    }
    result = subprocess.run(
        [sys.executable, "-m", "rllm", "dataset", "pull", "gsm8k"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1, result.stderr
    assert "error: could not load huggingface:openai/gsm8k (main)" in result.stderr
    assert "the Hugging Face hub is unreachable" in result.stderr
    assert "rllm dataset register gsm8k FILE --split train" in result.stderr
    assert not (tmp_path / "datasets" / "gsm8k").exists()
