"""deploy/slurm/rllm_ray.sbatch run for real on this machine, under FAKE Slurm commands.

There is no Slurm here, so the test puts FAKE ``sbatch``, ``srun`` and ``scontrol`` on PATH:

- FAKE ``sbatch SCRIPT ARGS``: runs SCRIPT in the foreground (as ``sbatch --wait`` would wait for it) with
  the variables Slurm gives a batch step (``SLURM_JOB_ID``, ``SLURM_JOB_NODELIST``, ``SLURM_CPUS_PER_TASK``).
- FAKE ``srun [OPTIONS] CMD ...``: logs its arguments, skips the options and runs CMD on this machine.
- FAKE ``scontrol show hostnames LIST``: prints the comma-separated LIST one host a line (no ``node[1-4]``
  ranges).

Everything else is real: the script starts a Ray head (``ray start --head --block``) on loopback, waits for it,
then runs ``rllm train backend.name=distributed`` on the tiny model, whose 2 FSDP2 ranks (gloo) are Ray actors
of that cluster, for one step; at exit it stops the Ray head it started.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from conftest import require_ray

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "slurm" / "rllm_ray.sbatch"

FAKE_SBATCH = """#!/usr/bin/env bash
# FAKE sbatch: run the batch script here, in the foreground, with a batch step's Slurm variables.
export SLURM_JOB_ID=4242 SLURM_JOB_NODELIST="$FAKE_NODELIST" SLURM_CPUS_PER_TASK="$FAKE_CPUS"
exec bash "$@"
"""
FAKE_SRUN = """#!/usr/bin/env bash
# FAKE srun: log the step, drop srun's options, run the command on this machine.
printf '%s\\n' "$*" >>"$FAKE_SRUN_LOG"
while [[ $# -gt 0 && "$1" == -* ]]; do
  case "$1" in
    -w|-N|-n|-c|--nodelist|--nodes|--ntasks|--cpus-per-task) shift 2 ;;
    *) shift ;;
  esac
done
exec "$@"
"""
FAKE_SCONTROL = """#!/usr/bin/env bash
# FAKE scontrol: only `scontrol show hostnames a,b,c`.
[[ "$1 $2" == "show hostnames" ]] || { echo "FAKE scontrol: only 'show hostnames'" >&2; exit 2; }
tr ',' '\\n' <<<"$3"
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _fake_slurm(bin_dir: Path) -> None:
    bin_dir.mkdir()
    for name, text in (("sbatch", FAKE_SBATCH), ("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL)):
        path = bin_dir / name
        path.write_text(text)
        path.chmod(0o755)


def _processes_under(marker: str) -> list[str]:
    out = subprocess.run(["pgrep", "-af", marker], capture_output=True, text=True, check=False).stdout
    return [line for line in out.splitlines() if "pgrep" not in line]


def test_sbatch_script_starts_ray_and_trains(tiny_model_dir: Path, tmp_path: Path) -> None:
    require_ray()
    assert shutil.which("bash"), "bash is needed to run the batch script"
    _fake_slurm(tmp_path / "bin")
    # Ray's session directory, short (its sockets' paths must fit in 107 bytes) and ours alone, so other Ray
    # clusters on this machine neither collide with this one nor count as its leftovers.
    ray_tmp = Path(tempfile.mkdtemp(prefix="rllm-slurm-", dir="/tmp"))
    venv_bin = Path(sys.executable).parent
    env = {
        **os.environ,
        "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
        "RAY_USAGE_STATS_ENABLED": "0",
        "FAKE_NODELIST": "localhost",
        "FAKE_CPUS": "4",
        "FAKE_SRUN_LOG": str(tmp_path / "srun.log"),
        "RLLM_VENV": str(venv_bin.parent),
        "RLLM_RAY_HEAD_IP": "127.0.0.1",
        "RAY_PORT": str(_free_port()),
        "RAY_START_ARGS": f"--include-dashboard=false --temp-dir={ray_tmp}",
        "RLLM_RAY_WAIT_S": "300",
    }
    runs = tmp_path / "runs"
    args = [
        f"model.path={tiny_model_dir}",
        "backend.device=cpu",
        "backend.distributed.world_size=2",
        # generous: on the shared 2-core machine, under load, the ranks took over 2 minutes to start
        "backend.distributed.startup_timeout_s=400",
        "lora.rank=4",
        "lora.alpha=8",
        "rollout.batch_size=2",
        "rollout.group_size=2",
        "rollout.max_tokens=4",
        "eval.before=false",
        "eval.after=false",
        "trainer.steps=1",
        "trainer.threads=1",
        "trainer.loggers=[jsonl]",
        "trainer.plot=false",
        f"trainer.run_dir={runs}",
        "trainer.name=slurm",
    ]
    try:
        proc = subprocess.run(
            ["sbatch", str(SCRIPT), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        log = proc.stdout + proc.stderr
        assert proc.returncode == 0, log[-4000:]
        assert "Ray cluster up: 1 node(s) at 127.0.0.1:" in log
        steps = [json.loads(line) for line in (runs / "slurm" / "metrics.jsonl").read_text().splitlines()]
        assert [s["step"] for s in steps] == [1]
        srun_calls = (tmp_path / "srun.log").read_text().splitlines()
        assert len(srun_calls) == 1 and srun_calls[0].startswith(
            "--nodes=1 --ntasks=1 --overlap -w localhost"
        )
        assert "ray start --head --block --node-ip-address=127.0.0.1" in srun_calls[0]
        # The EXIT trap stopped the head it started (its processes run under our session directory).
        deadline = time.monotonic() + 60
        while _processes_under(str(ray_tmp)) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not _processes_under(str(ray_tmp)), "the script's Ray processes outlived it"
    finally:
        for line in _processes_under(str(ray_tmp)):
            os.kill(int(line.split()[0]), 9)
        shutil.rmtree(ray_tmp, ignore_errors=True)


def test_sbatch_script_refuses_outside_slurm(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    proc = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 1
    assert "SLURM_JOB_NODELIST is not set: submit this script with sbatch" in proc.stderr
