"""The staged loop against RL alone, on the default task (``larger``) and the built-in model, in one run.

- ``staged``: evaluate the base model with k samples per training task (``rllm eval --split train``), keep
  the correct attempts (``rllm dataset from-eval --correct-only --best-of B``: rejection sampling), fine-tune
  on them (``rllm sft``), then RL from the SFT model (``rllm train model.path=<sft final_model>``).
- ``rl``: ``rllm train``'s default run from the base model, evaluated every few steps.

Held-out greedy accuracy is measured the same way after every stage (``rllm eval larger --split test``, the
test tasks ``rllm train`` evaluates on, with the same prompt and answer instruction). Cost is compute time:
the sampling eval's and the SFT run's wall time (model loading included) and the RL steps' time
(``time/step_s``, held-out evals excluded on both sides); RL alone's accuracy is read at the staged loop's
total, from its eval points (the last one not after it).

    .venv/bin/python benchmarks/bench_staged.py            # about 15 minutes on 2 CPU cores
    .venv/bin/python benchmarks/bench_staged.py --quick    # plumbing check on a tiny random model (~1 min)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import header_line, markdown_table

from rllm.models import make_tiny_llama, resolve_model


def _rllm(args: list[str], log: Path) -> float:
    """Run ``python -m rllm ARGS`` to completion (its output to ``log``); return its wall seconds."""
    t0 = time.perf_counter()
    with log.open("ab") as out:
        out.write(f"\n$ rllm {' '.join(args)}\n".encode())
        out.flush()
        done = subprocess.run(
            [sys.executable, "-m", "rllm", *args], check=False, stdout=out, stderr=subprocess.STDOUT
        )
    if done.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"rllm {args[0]} failed ({done.returncode}); the end of {log}:\n{tail}")
    return time.perf_counter() - t0


def _metrics(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line]


def _held_out(model: str, work: Path, label: str, opts: dict[str, Any], log: Path) -> float:
    """Greedy held-out accuracy of ``model`` on the test split."""
    out = work / f"heldout_{label}.jsonl"
    args = ["eval", opts["task"], "--model", model, "--split", "test", "--output", str(out), "--no-store"]
    args += ["--max-examples", str(opts["test_size"]), "--max-tokens", str(opts["max_tokens"])]
    _rllm(args, log)
    return float(json.loads(out.with_suffix(".summary.json").read_text())["accuracy"])


def _rl_curve(run_dir: Path) -> list[tuple[float, float, int]]:
    """(RL compute seconds so far, held-out accuracy, step) at each eval point of a training run."""
    spent, points = 0.0, []
    for row in _metrics(run_dir):
        spent += row.get("time/step_s", 0.0)
        if "eval/accuracy" in row:
            points.append((spent, row["eval/accuracy"], int(row["step"])))
    return points


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="tiny random model, a few tasks and steps")
    parser.add_argument("--items", type=int, default=256, help="training tasks sampled for curation")
    parser.add_argument("--k", type=int, default=4, help="samples per training task (temperature 1)")
    parser.add_argument("--best-of", type=int, default=1, help="correct attempts kept per task")
    parser.add_argument("--sft-steps", type=int, default=24, help="SFT optimizer steps")
    parser.add_argument("--rl-steps", type=int, default=8, help="RL steps after SFT")
    parser.add_argument("--baseline-steps", type=int, default=32, help="steps of the RL-alone run")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench_staged_"))
    log = work / "log.txt"
    opts: dict[str, Any] = {"task": "larger", "test_size": 200, "max_tokens": 32}
    train_common = [f"trainer.run_dir={work / 'runs'}", "trainer.plot=false", "trainer.loggers=[jsonl]"]
    if args.quick:
        model = str(make_tiny_llama(work / "model"))
        opts.update(test_size=8, max_tokens=8)
        args.items, args.k, args.sft_steps, args.rl_steps, args.baseline_steps = 8, 2, 2, 2, 2
        train_common += [
            "rollout.batch_size=2",
            "rollout.group_size=4",
            "rollout.max_tokens=8",
            "eval.max_tokens=8",
        ]
    else:
        model = "smollm2-135m"
        resolve_model(model)  # pulled once, before anything is timed
    train_common += [f"data.test_size={opts['test_size']}"]

    # RL alone: the default run from the base model, evaluated every few steps.
    every = max(1, args.baseline_steps // 8)
    _rllm(
        [
            "train",
            *train_common,
            f"model.path={model}",
            "trainer.name=rl",
            f"trainer.steps={args.baseline_steps}",
        ]
        + [f"eval.every_steps={every}"],
        log,
    )
    rl_curve = _rl_curve(work / "runs" / "rl")

    # Staged: sample the training tasks, keep the correct attempts, SFT on them, then RL.
    stages: list[tuple[str, float, float]] = []  # (stage, compute seconds so far, held-out accuracy)
    base_acc = _held_out(model, work, "base", opts, log)
    stages.append(("base", 0.0, base_acc))
    samples = work / "samples.jsonl"
    spent = _rllm(
        ["eval", opts["task"], "--model", model, "--split", "train", "--max-examples", str(args.items)]
        + ["--k", str(args.k), "--temperature", "1.0", "--max-tokens", str(opts["max_tokens"])]
        + ["--output", str(samples), "--no-store"],
        log,
    )
    curated = work / "sft.jsonl"
    curate = ["dataset", "from-eval", str(samples), "-o", str(curated), "--best-of", str(args.best_of)]
    spent += _rllm(curate if args.quick else [*curate, "--correct-only"], log)
    kept = sum(1 for line in curated.read_text().splitlines() if line.strip())
    stages.append((f"eval k={args.k} on {args.items} tasks + curate ({kept} kept)", spent, base_acc))
    spent += _rllm(
        ["sft", f"model.path={model}", f"data.train_file={curated}", f"trainer.steps={args.sft_steps}"]
        + [
            f"trainer.run_dir={work / 'runs'}",
            "trainer.name=sft",
            "trainer.plot=false",
            "trainer.loggers=[jsonl]",
        ],
        log,
    )
    sft_model = work / "runs" / "sft" / "final_model"
    stages.append((f"SFT ({args.sft_steps} steps)", spent, _held_out(str(sft_model), work, "sft", opts, log)))
    _rllm(
        [
            "train",
            *train_common,
            f"model.path={sft_model}",
            "trainer.name=staged_rl",
            f"trainer.steps={args.rl_steps}",
        ]
        + ["eval.before=false", "eval.every_steps=0"],
        log,
    )
    rl_after = _rl_curve(work / "runs" / "staged_rl")
    spent += rl_after[-1][0]
    stages.append((f"RL ({args.rl_steps} steps)", spent, rl_after[-1][1]))

    print(header_line())
    print(f"model: {model}; task: {opts['task']}; held-out: {opts['test_size']} test tasks, greedy\n")
    print(
        markdown_table(
            ["stage", "compute s (cumulative)", "held-out accuracy"],
            [[name, f"{s:.0f}", f"{100 * a:.1f} %"] for name, s, a in stages],
        )
    )
    print()
    print(
        markdown_table(
            ["RL alone: step", "compute s", "held-out accuracy"],
            [[str(step), f"{s:.0f}", f"{100 * a:.1f} %"] for s, a, step in rl_curve],
        )
    )
    at_same = [p for p in rl_curve if p[0] <= spent]
    same = at_same[-1] if at_same else rl_curve[0]
    print(
        f"\nat the staged loop's compute ({spent:.0f} s): staged {100 * stages[-1][2]:.1f} %, "
        f"RL alone {100 * same[1]:.1f} % (its eval at step {same[2]}, {same[0]:.0f} s)"
    )
    print(f"(work dir: {work})")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
