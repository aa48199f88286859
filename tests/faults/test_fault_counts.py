"""The fault benchmark's counters on their own (fast tier; the fault scenarios themselves are in
test_faults.py, slow tier, and in benchmarks/bench_faults.py --quick)."""

from __future__ import annotations

import _faults


def test_step_counts_take_the_eval_before_training_as_step_0() -> None:
    """metrics.jsonl's step-0 line is the held-out eval before training: not a duplicate (the full run under
    faults of 2026-12-03 printed duplicated=1 for it before this)."""
    from collections import Counter

    row = _faults.FaultRow("steps")
    _faults.step_counts(row, Counter({0: 1, 1: 1, 2: 1, 3: 1}), 3)
    assert (row.lost, row.duplicated) == (0, 0)
    _faults.step_counts(row, Counter({0: 1, 1: 2, 3: 1, 4: 1}), 3)
    assert (row.lost, row.duplicated) == (1, 2)  # step 2 missing; step 1 twice, step 4 beyond the run
