"""What a training run reports about its episodes: the metrics of a step's rollout and of a held-out eval,
the console's columns, and the end-of-run plot. Pure summaries; the loop decides when to log them."""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path

import numpy as np

from rllm.types import Episode
from rllm.utils.metrics import plot_metrics, summarize

logger = logging.getLogger(__name__)

# metric -> console column label
CONSOLE_KEYS = {
    "reward/mean": "reward",
    "accuracy": "acc",
    "response_len/mean": "resp_len",
    "train/entropy": "entropy",
    "train/clip_fraction": "clip_frac",
    "train/approx_kl": "kl",
    "train/grad_norm": "grad_norm",
    "time/step_s": "step_s",
    "time/eta_s": "eta_s",
    "eval/accuracy": "eval_acc",
}


def episode_metrics(episodes: list[Episode]) -> dict[str, float]:
    """Rollout metrics of one step: reward, accuracy, lengths, termination reasons."""
    rewards = [e.reward or 0.0 for e in episodes]
    lengths = [len(s.response_ids) for e in episodes for t in e.trajectories for s in t.steps]
    out = summarize(rewards, "reward")
    out.update(summarize([float(x) for x in lengths] or [0.0], "response_len"))
    graded = [e.is_correct for e in episodes if e.is_correct is not None]
    if graded:
        out["accuracy"] = float(np.mean(graded))
    out["episodes"] = float(len(episodes))
    # What flows report per episode (assembly/*, signal/*, episode_time_s): averaged over the step.
    keys = sorted({k for e in episodes for k in e.metrics})
    for k in keys:
        vals = [e.metrics[k] for e in episodes if k in e.metrics]
        out[k if "/" in k else f"episode/{k}"] = float(np.mean(vals))
    for reason, n in Counter(e.termination_reason.value for e in episodes).items():
        out[f"termination/{reason}"] = n / len(episodes)
    out.update(role_rewards(episodes))
    out["episodes/failed"] = float(sum(e.failed for e in episodes))
    return out


def role_rewards(episodes: list[Episode]) -> dict[str, float]:
    """``role/<name>/reward``: the mean reward of each trajectory name's trajectories (each role's own
    credit in a multi-agent workflow); nothing when the episodes have one role only."""
    by_role: dict[str, list[float]] = {}
    for e in episodes:
        for t in e.trajectories:
            if t.reward is not None:
                by_role.setdefault(t.name, []).append(t.reward)
    if len(by_role) < 2:
        return {}
    return {f"role/{name}/reward": float(np.mean(vals)) for name, vals in sorted(by_role.items())}


def eval_metrics(episodes: list[Episode], seconds: float) -> dict[str, float]:
    """Metrics of one greedy held-out eval (``seconds``: how long it took): accuracy, reward, lengths."""
    out = {
        "eval/accuracy": float(np.mean([bool(e.is_correct) for e in episodes])),
        "eval/reward": float(np.mean([e.reward or 0.0 for e in episodes])),
        "eval/n": float(len(episodes)),
        # A failed held-out episode (its flow or reward raised, or it timed out) counts as wrong above.
        "eval/failed": float(sum(e.failed for e in episodes)),
        "eval/response_len": float(
            np.mean([len(s.response_ids) for e in episodes for t in e.trajectories for s in t.steps] or [0])
        ),
        "eval/time_s": seconds,
    }
    # What flows and evaluators report per episode (signal/*, tools/*, judge/*, ...), averaged over the
    # held-out set.
    for key in sorted({k for e in episodes for k in e.metrics if "/" in k}):
        out[f"eval/{key}"] = float(np.mean([e.metrics[key] for e in episodes if key in e.metrics]))
    return out


def try_plot(run_dir: Path) -> None:
    """Write ``metrics.png`` (reward, accuracy, length, entropy curves) beside ``metrics.jsonl``, if
    matplotlib is installed."""
    try:
        plot_metrics(
            run_dir / "metrics.jsonl",
            run_dir / "metrics.png",
            ["reward/mean", "eval/accuracy", "response_len/mean", "train/entropy"],
        )
    except ImportError:
        logger.info("matplotlib not installed; skipping metrics.png")
    except ValueError as exc:
        logger.info("no plot: %s", exc)
