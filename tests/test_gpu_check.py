"""scripts/gpu_check.sh: one failing section leaves the others' rows, and (slow) the CPU dry run runs every
section of the script through the real trainer, engine and backends and prints their rows."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = ["grpo full", "grpo lora", "decode b1", "decode b32", "distributed ray ws=1", "fsdp rank ws=1"]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_a_failing_section_is_an_error_row_and_the_next_still_runs() -> None:
    gpu_check = _script()
    rows: list = []

    def broken() -> object:
        raise RuntimeError("CUDA out of memory.\nTried to allocate 2.00 GiB")

    gpu_check.run_section(rows, "grpo full", broken)
    gpu_check.run_section(
        rows, "decode b1", lambda: gpu_check.Row("decode b1", numbers={"decode_tok_s": 1234.5})
    )
    assert [(r.section, r.status) for r in rows] == [("grpo full", "error"), ("decode b1", "ok")]
    assert rows[0].note == "RuntimeError: Tried to allocate 2.00 GiB"
    lines = gpu_check.table(rows).splitlines()
    assert lines[0].startswith("| section | status | step_s |")
    assert lines[2].startswith("| grpo full | error |") and "Tried to allocate" in lines[2]
    assert lines[3].startswith("| decode b1 | ok |") and "1,234" in lines[3]


def test_without_cuda_the_gpu_run_refuses_and_names_the_dry_run(capsys: pytest.CaptureFixture[str]) -> None:
    gpu_check = _script()
    if gpu_check.torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert gpu_check.main([]) == 2
    assert "--dry-run" in capsys.readouterr().out


@pytest.mark.slow
def test_dry_run_runs_every_section(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--dry-run", "--json", str(out)],
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = {row["section"]: row for row in json.loads(out.read_text())}
    assert list(rows) == SECTIONS
    has_ray = importlib.util.find_spec("ray") is not None
    for name, row in rows.items():
        if name == "distributed ray ws=1" and not has_ray:
            assert row["status"] == "skipped" and "ray not installed" in row["note"]
            continue
        assert row["status"] == "ok", row
        assert all(v > 0 for v in row["numbers"].values()), row
    assert rows["grpo full"]["numbers"].keys() >= {"step_s", "rollout_tok_s", "train_tok_s", "peak_mem_gib"}
    assert rows["decode b32"]["numbers"]["decode_tok_s"] > 0
    assert "| fsdp rank ws=1 | ok |" in proc.stdout  # the table is printed too
