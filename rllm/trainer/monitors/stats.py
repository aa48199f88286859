"""Pure statistics behind the monitors: two-sample distances between windows of a run, and what a step's
replies say about output collapse. Each formula is written out in its docstring (and in
docs/monitoring.md); scipy computes the statistics."""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np
from scipy.spatial.distance import jensenshannon
from scipy.stats import ks_2samp

from rllm.types import Episode

NGRAM = 4  # repetition: the n of the n-grams counted within a reply
MIN_TASKS_FOR_SAME_ANSWER = 4  # same_answer_share: fewer distinct tasks say nothing about collapse


def ks_statistic(reference_N: Sequence[float], recent_M: Sequence[float]) -> tuple[float, float]:
    """The two-sample Kolmogorov-Smirnov statistic and its p-value:
    ``D = sup_x |F_ref(x) - F_recent(x)|`` over the two empirical CDFs, in [0, 1] (0: the same
    distribution of values; 1: no overlap). For 0/1 rewards it is the difference of the two success rates."""
    with (
        warnings.catch_warnings()
    ):  # scipy falls back from the exact p-value to the asymptotic one, and says so
        warnings.simplefilter("ignore", RuntimeWarning)
        result = ks_2samp(np.asarray(reference_N, dtype=float), np.asarray(recent_M, dtype=float))
    return float(result.statistic), float(result.pvalue)


def js_divergence(reference: Mapping[str, float], recent: Mapping[str, float]) -> float:
    """The Jensen-Shannon divergence (base 2, in [0, 1]) between two histograms over named bins:
    ``JSD(P, Q) = 1/2 KL(P || M) + 1/2 KL(Q || M)`` with ``M = (P + Q) / 2``, each normalised to sum to 1.
    0: the same mix; 1: no bin in common."""
    bins = sorted(set(reference) | set(recent))
    p = np.array([reference.get(b, 0.0) for b in bins], dtype=float)
    q = np.array([recent.get(b, 0.0) for b in bins], dtype=float)
    if not bins or p.sum() <= 0 or q.sum() <= 0:
        return 0.0
    return float(jensenshannon(p, q, base=2) ** 2)  # scipy returns the distance, the divergence's square root


def repeated_ngram_share(tokens: Sequence[int], n: int = NGRAM) -> float | None:
    """The share of a reply's n-grams that repeat an earlier one: ``1 - distinct / total`` over its
    ``len - n + 1`` n-grams (0: no n-gram twice; near 1: one phrase looped). None for a reply shorter than n."""
    total = len(tokens) - n + 1
    if total <= 0:
        return None
    grams = {tuple(tokens[i : i + n]) for i in range(total)}
    return 1.0 - len(grams) / total


def final_reply(episode: Episode) -> str:
    """The episode's answer: the text of the last LLM call of its last trajectory (empty if none)."""
    for trajectory in reversed(episode.trajectories):
        if trajectory.steps:
            return trajectory.steps[-1].response_text
    return ""


def normalize_answer(text: str) -> str:
    """How replies are compared across tasks: case-folded, whitespace collapsed."""
    return " ".join(text.split()).casefold()


def same_answer_share(answers_by_task: Mapping[str, Sequence[str]]) -> float | None:
    """Of a step's distinct tasks, the share whose most common (normalised) answer is the answer most of
    them share: 1/n_tasks when every task has its own, 1 when all give the same one. None with fewer than
    ``MIN_TASKS_FOR_SAME_ANSWER`` tasks."""
    modal = [
        Counter(normalize_answer(a) for a in answers).most_common(1)[0][0]
        for answers in answers_by_task.values()
        if answers
    ]
    if len(modal) < MIN_TASKS_FOR_SAME_ANSWER:
        return None
    return Counter(modal).most_common(1)[0][1] / len(modal)


def collapse_stats(episodes: Sequence[Episode]) -> dict[str, float]:
    """A step's output-collapse statistics (``monitor/hacking/same_answer``, ``monitor/hacking/repetition``)
    over its finished episodes; a statistic with nothing to measure is left out."""
    answers: dict[str, list[str]] = {}
    shares: list[float] = []
    for episode in episodes:
        if episode.failed:
            continue
        answers.setdefault(episode.task_id, []).append(final_reply(episode))
        for trajectory in episode.trajectories:
            for step in trajectory.steps:
                share = repeated_ngram_share(step.response_ids)
                if share is not None:
                    shares.append(share)
    out: dict[str, float] = {}
    same = same_answer_share(answers)
    if same is not None:
        out["monitor/hacking/same_answer"] = same
    if shares:
        out["monitor/hacking/repetition"] = float(np.mean(shares))
    return out
