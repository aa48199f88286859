"""Solver–judge with a LoRA adapter per role against one shared adapter: the same run twice, one after the
other, in one invocation.

- ``shared``: ``examples/solver_judge/config.yaml`` as it is: the solvers and the judge sample from and
  train one LoRA adapter (one set of weights, one optimizer).
- ``per_role``: the same config with ``roles.solver.adapter=solver roles.judge.adapter=judge``: each role
  samples from and trains its own adapter with its own AdamW (docs/agents.md, Separate weights per role).

Both on the built-in model and the built-in ``larger`` task, same seed. It prints, before and after
training, the held-out greedy accuracy of the system (the judge's picked answer is right), the solvers'
accuracy, how often the judge names a solution, and judge agreement: of the held-out questions where some
solver was right (``judge/oracle``), the share where the judge picked a right one (``judge/accuracy``);
and the median step time.

    .venv/bin/python benchmarks/bench_roles.py            # 16 steps each on smollm2-135m
    .venv/bin/python benchmarks/bench_roles.py --steps 8  # shorter
    .venv/bin/python benchmarks/bench_roles.py --quick    # plumbing check: 2 steps each on a tiny model

The per-role run needs an inference engine that samples from a different adapter per call
(``EngineCapabilities.adapters``); where the engine lacks it the run is refused at start-up and the script
says so and exits 1.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import header_line, markdown_table, resolve_bench_model

from rllm.trainer.agent_trainer import AgentTrainer
from rllm.trainer.backends.base import UnsupportedConfigError
from rllm.trainer.config import TrainConfig
from rllm.utils.config import load_config

CONFIG = Path(__file__).resolve().parents[1] / "examples" / "solver_judge" / "config.yaml"
PER_ROLE = ["roles.solver.adapter=solver", "roles.judge.adapter=judge"]


def _judge_agreement(ev: dict[str, float]) -> str:
    """Of the questions some solver answered right, the share where the judge picked a right answer."""
    n, oracle, picked = ev.get("eval/n", 0.0), ev.get("eval/judge/oracle"), ev.get("eval/judge/accuracy")
    if oracle is None or picked is None or oracle == 0:
        return "- (no solver right)"
    return f"{100 * picked / oracle:.0f} % ({round(picked * n)} of {round(oracle * n)})"


def _run(name: str, trainer: AgentTrainer) -> dict[str, Any]:
    cfg = trainer.cfg
    t0 = time.perf_counter()
    result = trainer.train()
    wall = time.perf_counter() - t0
    rows = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "time/step_s" in r]
    history = {h["step"]: h for h in result.eval_history}
    return {
        "name": name,
        "before": history.get(0, {}),
        "after": history.get(cfg.trainer.steps, {}),
        "steps": len(steps),
        "step_s": statistics.median(r["time/step_s"] for r in steps) if steps else float("nan"),
        "wall_s": wall,
    }


def _pct(ev: dict[str, float], key: str) -> str:
    return "-" if key not in ev else f"{100 * ev[key]:.0f} %"


def _table(runs: list[dict[str, Any]]) -> str:
    rows = []
    for r in runs:
        for when in ("before", "after"):
            ev = r[when]
            rows.append(
                [
                    r["name"],
                    "0" if when == "before" else str(r["steps"]),
                    _pct(ev, "eval/accuracy"),
                    _pct(ev, "eval/solver/accuracy"),
                    _pct(ev, "eval/judge/valid_pick"),
                    _judge_agreement(ev) if ev else "-",
                ]
            )
    headers = [
        "weights",
        "step",
        "held-out accuracy (picked answer)",
        "solver accuracy",
        "judge names a solution",
        "judge agreement (picks a right one when one exists)",
    ]
    timing = markdown_table(
        ["weights", "steps", "median step s", "wall s"],
        [[r["name"], str(r["steps"]), f"{r['step_s']:.2f}", f"{r['wall_s']:.0f}"] for r in runs],
    )
    return markdown_table(headers, rows) + "\n\n" + timing


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="2 steps each on a tiny random model")
    parser.add_argument("--steps", type=int, default=None, help="steps per run (default: the example's 16)")
    parser.add_argument("--model", default=None, help="model.path (default: smollm2-135m; tiny with --quick)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench_roles_"))
    model = resolve_bench_model(args.model or ("tiny" if args.quick else "smollm2-135m"))
    common = [
        f"model.path={model}",
        f"trainer.run_dir={work / 'runs'}",
        "trainer.plot=false",
        "trainer.loggers=[jsonl]",
        "trainer.store_enabled=false",
        "eval.before=true",
    ]
    if args.quick:
        common += [
            "trainer.steps=2",
            "rollout.batch_size=2",
            "rollout.group_size=2",
            "rollout.max_tokens=8",
            "data.test_size=8",
            "eval.max_tokens=8",
            "eval.every_steps=0",
            "trainer.threads=null",
        ]
    if args.steps:
        common.append(f"trainer.steps={args.steps}")
    configs = {
        "shared": [*common, "trainer.name=shared"],
        "per_role": [*common, "trainer.name=per_role", *PER_ROLE],
    }
    try:  # both built (and checked) before either trains: a refused config costs no training run
        trainers = {
            name: AgentTrainer(load_config(TrainConfig, str(CONFIG), o)) for name, o in configs.items()
        }
    except UnsupportedConfigError as exc:
        print(f"refused at start-up: {exc}", file=sys.stderr)
        return 1
    runs = [_run(name, trainer) for name, trainer in trainers.items()]
    print(header_line())
    settings = " ".join(c for c in common if not c.startswith(("model.path=", "trainer.run_dir=")))
    print(
        f"model: {model}; examples/solver_judge/config.yaml with {settings}; per_role adds {' '.join(PER_ROLE)}\n"
    )
    print(_table(runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
