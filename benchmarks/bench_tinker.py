"""``backend.name=tinker`` through ``rllm serve tinker`` on this machine, against the local backend: the same
run (the default task, config and seed) twice, one after the other, in one invocation.

- ``local``: ``rllm train``'s default run, as ``rllm train`` runs it (LoRA on the local backend, local
  engine, in this process).
- ``tinker``: the same config with ``backend.name=tinker``: the real ``tinker`` SDK talks over loopback HTTP
  to ``rllm serve tinker`` (a subprocess started here, serving the same model), which trains the LoRA
  adapter with rllm's local backend and samples with rllm's local engine.

It prints held-out greedy accuracy before and after each run and the median step time (rollout + update +
weight sync; the service's overhead is HTTP, serialisation, the futures' polling and the sampler snapshot
after every step). Targets: the tinker run gains >= 30 points, and its step takes <= 1.2x the local one.

    .venv/bin/python benchmarks/bench_tinker.py            # the default run twice (about 10 minutes)
    .venv/bin/python benchmarks/bench_tinker.py --quick    # plumbing check: 2 steps each on a tiny model
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from _common import header_line, markdown_table

from rllm.models import make_tiny_llama, resolve_model
from rllm.trainer.agent_trainer import AgentTrainer
from rllm.trainer.config import TrainConfig
from rllm.utils.config import load_config

GAIN_TARGET = 0.30
OVERHEAD_TARGET = 1.2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(model: str, port: int, state_dir: Path, log: Path) -> subprocess.Popen[bytes]:
    """``rllm serve tinker`` in a subprocess; returns once it answers its health check."""
    cmd = [sys.executable, "-m", "rllm", "serve", "tinker", "--model", model, "--port", str(port)]
    cmd += ["--state-dir", str(state_dir)]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"rllm serve tinker exited ({proc.returncode}): {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/api/v1/healthz", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.kill()
    raise RuntimeError("rllm serve tinker did not come up within 300 s")


def _run(name: str, overrides: list[str]) -> dict[str, Any]:
    cfg = load_config(TrainConfig, None, overrides)
    t0 = time.perf_counter()
    result = AgentTrainer(cfg).train()
    wall = time.perf_counter() - t0
    rows = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "time/step_s" in r]
    return {
        "name": name,
        "before": result.initial_accuracy,
        "after": result.final_accuracy,
        "step_s": statistics.median(r["time/step_s"] for r in steps),
        "rollout_s": statistics.median(r.get("time/rollout_s", 0.0) for r in steps),
        "train_s": statistics.median(r.get("time/train_s", 0.0) for r in steps),
        "sync_s": statistics.median(r.get("time/sync_s", 0.0) for r in steps),
        "wall_s": wall,
        "steps": len(steps),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="2 steps each on a tiny random model")
    parser.add_argument("--steps", type=int, default=None, help="steps per run (default: the default run's)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench_tinker_"))
    common = [f"trainer.run_dir={work / 'runs'}", "trainer.plot=false", "trainer.loggers=[jsonl]"]
    if args.quick:
        model = str(make_tiny_llama(work / "model"))
        common += [
            f"model.path={model}",
            "trainer.steps=2",
            "rollout.batch_size=2",
            "rollout.group_size=4",
            "rollout.max_tokens=8",
            "data.test_size=8",
            "eval.max_tokens=8",
        ]
    else:
        model = "smollm2-135m"
        resolve_model(model)  # pulled once, before either run is timed
        if args.steps:
            common.append(f"trainer.steps={args.steps}")
    port = _free_port()
    server = _serve(model, port, work / "tinker_state", work / "serve.log")
    try:
        local = _run("local", [*common, "trainer.name=local"])
        tinker = _run(
            "tinker",
            [
                *common,
                "trainer.name=tinker",
                "backend.name=tinker",
                f"backend.tinker.base_url=http://127.0.0.1:{port}",
            ],
        )
    finally:
        server.terminate()
        server.wait(timeout=60)
    print(header_line())
    print(f"model: {model}; same config and seed on both sides; the service ran on this machine (loopback)\n")

    def acc(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.1f} %"

    rows = [
        [
            r["name"],
            str(r["steps"]),
            acc(r["before"]),
            acc(r["after"]),
            f"{r['step_s']:.2f}",
            f"{r['rollout_s']:.2f}",
            f"{r['train_s']:.2f}",
            f"{r['sync_s']:.2f}",
            f"{r['wall_s']:.0f}",
        ]
        for r in (local, tinker)
    ]
    print(
        markdown_table(
            [
                "backend",
                "steps",
                "before",
                "after",
                "step s (median)",
                "rollout s",
                "update s",
                "sync s",
                "wall s",
            ],
            rows,
        )
    )
    ratio = tinker["step_s"] / local["step_s"]
    gain = (tinker["after"] or 0.0) - (tinker["before"] or 0.0)
    print(f"\ntinker step time / local: {ratio:.2f}x (target <= {OVERHEAD_TARGET}x)")
    print(f"tinker accuracy gain: {100 * gain:+.1f} points (target >= +{100 * GAIN_TARGET:.0f})")
    if args.quick:
        return 0  # a tiny random model learns nothing in 2 steps: the plumbing is what --quick checks
    return 0 if ratio <= OVERHEAD_TARGET and gain >= GAIN_TARGET else 1


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
