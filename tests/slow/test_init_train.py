"""`rllm init` then `rllm train` in the project, with the console script, on the built-in model for a
couple of steps: the project's ./rllm.yaml, flow and task files are found from its directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rllm.cli.init_cmd import create_project

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.parametrize("template", ["math", "gateway-agent"])
def test_rllm_train_in_a_new_project(tmp_path: Path, template: str) -> None:
    project = tmp_path / "proj"
    create_project(project, template)
    rllm_script = Path(sys.executable).with_name("rllm")
    env = {**os.environ, "PYTHONPATH": str(REPO), "RLLM_STORE": str(tmp_path / "rllm.db")}
    result = subprocess.run(
        [
            str(rllm_script),
            "train",
            "trainer.steps=2",
            "data.test_size=8",
            "rollout.batch_size=4",
            "rollout.group_size=4",
            "trainer.plot=false",
        ],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "config: rllm.yaml" in result.stderr
    assert "held-out greedy accuracy on 8 tasks" in result.stdout
    assert (project / "runs" / "proj" / "final_model").is_dir()
