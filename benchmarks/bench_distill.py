"""On-policy distillation against RL from scratch, on the same task and the same steps budget.

The teacher is a model rllm trained: the default run's final model (``rllm train`` with no overrides:
smollm2-135m, LoRA, GRPO on ``data.task=larger``). The student is the base model. Two runs:

- (a) ``distill``: the default config plus ``algorithm.distill.teacher=<teacher> mode=alone`` (the task
  reward ignored: every token's advantage is -(student logprob - teacher logprob)) and
  ``algorithm.filters.drop_zero_variance=false``;
- (b) ``rl``: the default run itself. It *is* the run that made the teacher, so ``--baseline-run`` reads
  its metrics instead of running it again (same config, same seed, same steps).

It prints, side by side, the held-out greedy accuracy at each eval point, the per-token reverse KL to the
teacher at each step (distill only: the RL run has no teacher in its loop) and the steps each needs to reach
90 % of the teacher's accuracy (the teacher's: the default run's final eval).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_distill.py --teacher runs/default/final_model \\
        --baseline-run runs/default                 # full: 32 steps of distillation (CPU: ~20-40 min)
    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_distill.py --quick   # plumbing: tiny models, < 1 min

``--quick`` runs both modes for a few steps on tiny random Llamas with the smollm2 tokenizer (the teacher is
the student's init with sharpened outputs): accuracy stays at 0 there, and six steps over a 49k-token
vocabulary are too few for the KL to move beyond noise; it checks that the teacher scores every step and
that the report prints. That distillation learns is tests/trainer/test_distill_run.py's job (a 16-token
vocabulary, where the reverse KL falls from 3.6 to 0.8 in 20 steps).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from _common import header_line, markdown_table

from rllm.trainer.agent_trainer import AgentTrainer
from rllm.trainer.config import TrainConfig
from rllm.utils.config import load_config

TARGET_FRACTION = 0.9
DISTILL = ["algorithm.distill.mode=alone", "algorithm.filters.drop_zero_variance=false"]
QUICK = [
    "lora.enabled=false",
    "backend.autocast=none",
    "inference.dtype=float32",
    "optim.lr=0.01",
    "rollout.batch_size=4",
    "rollout.group_size=4",
    "rollout.max_tokens=8",
    "data.train_size=32",
    "data.test_size=8",
    "eval.max_tokens=8",
    "eval.every_steps=2",
    "trainer.steps=6",
]


def run(name: str, run_dir: Path, overrides: list[str]) -> list[dict[str, Any]]:
    """One training run in this process; returns its metrics.jsonl records."""
    cfg = load_config(
        TrainConfig,
        None,
        [
            *overrides,
            f"trainer.run_dir={run_dir}",
            f"trainer.name={name}",
            "trainer.loggers=[jsonl]",
            "trainer.plot=false",
        ],
    )
    result = AgentTrainer(cfg).train()
    return read_metrics(result.run_dir)


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        sys.exit(f"{run_dir} has no metrics.jsonl: pass the directory of a finished rllm train run")
    return [json.loads(line) for line in path.read_text().splitlines()]


def eval_points(records: list[dict[str, Any]]) -> dict[int, float]:
    return {r["step"]: r["eval/accuracy"] for r in records if "eval/accuracy" in r}


def steps_to(points: dict[int, float], target: float) -> str:
    if target <= 0:
        return "n/a (teacher at 0)"
    hit = [step for step, acc in sorted(points.items()) if acc >= target]
    return str(hit[0]) if hit else f"not within {max(points, default=0)}"


def report(distill: list[dict[str, Any]], rl: list[dict[str, Any]], teacher_accuracy: float) -> None:
    acc_d, acc_r = eval_points(distill), eval_points(rl)
    kl = {r["step"]: r["distill/reverse_kl"] for r in distill if "distill/reverse_kl" in r}
    t_s = [r["distill/teacher_s"] for r in distill if "distill/teacher_s" in r]
    step_s = {
        "distill": _mean(r.get("time/step_s") for r in distill),
        "rl": _mean(r.get("time/step_s") for r in rl),
    }
    print(header_line())
    print(f"\nheld-out greedy accuracy per eval point (teacher: {teacher_accuracy:.3f})\n")
    rows = [[str(s), _fmt(acc_d.get(s)), _fmt(acc_r.get(s))] for s in sorted(set(acc_d) | set(acc_r))]
    print(markdown_table(["step", "(a) distill", "(b) RL from scratch"], rows))
    print("\nper-token reverse KL to the teacher, distillation run (mean over trained tokens)\n")
    print(markdown_table(["step", "reverse KL"], [[str(s), f"{v:.4f}"] for s, v in sorted(kl.items())]))
    target = TARGET_FRACTION * teacher_accuracy
    print(f"\nsteps to {TARGET_FRACTION:.0%} of the teacher's accuracy ({target:.3f}), at the eval points\n")
    print(
        markdown_table(
            ["run", "steps", "mean step s", "teacher scoring s/step"],
            [
                ["(a) distill", steps_to(acc_d, target), _fmt(step_s["distill"], 1), _fmt(_mean(t_s), 2)],
                ["(b) RL from scratch", steps_to(acc_r, target), _fmt(step_s["rl"], 1), "-"],
            ],
        )
    )


def _mean(values: Any) -> float | None:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def quick(out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from rllm.models import make_tiny_llama

    student = make_tiny_llama(out / "student", seed=0)
    teacher = make_tiny_llama(out / "teacher", seed=0)
    model = AutoModelForCausalLM.from_pretrained(teacher, dtype=torch.float32)
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(4.0)  # the student's init, sharpened: a peaked teacher
    model.save_pretrained(teacher)
    base = [f"model.path={student}", *QUICK]
    distill = run("distill", out, [*base, f"algorithm.distill.teacher={teacher}", *DISTILL])
    rl = run("rl", out, base)
    report(distill, rl, teacher_accuracy=0.0)
    kl = [r["distill/reverse_kl"] for r in distill if "distill/reverse_kl" in r]
    if len(kl) != len([r for r in distill if "time/step_s" in r]):
        sys.exit(f"the teacher did not score every step: {kl}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="tiny random models, a few steps (plumbing check)"
    )
    parser.add_argument("--teacher", default="runs/default/final_model", help="the teacher's model directory")
    parser.add_argument(
        "--baseline-run",
        default=None,
        help="the default run's directory (its metrics are (b)); without it (b) is run here",
    )
    parser.add_argument("--run-dir", default=None, help="where the runs go (default: a temporary directory)")
    parser.add_argument("--steps", type=int, default=None, help="trainer.steps (default: the default run's)")
    args = parser.parse_args()
    out = Path(args.run_dir or tempfile.mkdtemp(prefix="rllm-bench-distill-"))
    if args.quick:
        quick(out)
        return
    steps = [f"trainer.steps={args.steps}"] if args.steps else []
    rl = read_metrics(Path(args.baseline_run)) if args.baseline_run else run("rl", out, steps)
    rl_acc = eval_points(rl)
    if not rl_acc:
        sys.exit("the baseline run has no eval/accuracy records")
    teacher_accuracy = rl_acc[max(rl_acc)]  # the default run's final eval is its final model's: the teacher's
    if args.steps:  # the same budget: the baseline's first --steps steps (a constant LR: the same steps)
        rl = [r for r in rl if r["step"] <= args.steps]
    # Step 0's eval is the base model's, the same in both runs: the distillation run takes the baseline's.
    distill = run(
        "distill", out, [*steps, "eval.before=false", f"algorithm.distill.teacher={args.teacher}", *DISTILL]
    )
    distill.insert(0, {"step": 0, "eval/accuracy": rl_acc[0]} if 0 in rl_acc else {"step": 0})
    report(distill, rl, teacher_accuracy)


if __name__ == "__main__":
    main()
