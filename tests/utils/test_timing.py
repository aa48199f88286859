"""timed(): one context manager times a stage and writes its time/<name>_s metric."""

from __future__ import annotations

import time

import pytest

from rllm.utils.timing import timed


def test_the_stage_time_is_written_under_its_name_when_the_block_ends() -> None:
    metrics: dict[str, float] = {}
    with timed("rollout", metrics) as span:
        time.sleep(0.02)
        running = span.seconds
        assert "time/rollout_s" not in metrics
    assert 0.02 <= running <= metrics["time/rollout_s"] == span.seconds
    time.sleep(0.01)
    assert span.seconds == metrics["time/rollout_s"]  # fixed once the block ended


def test_nested_spans_time_their_own_blocks() -> None:
    metrics: dict[str, float] = {}
    with timed("step", metrics):
        with timed("sync", metrics):
            time.sleep(0.01)
        time.sleep(0.01)
    assert 0.01 <= metrics["time/sync_s"] < metrics["time/step_s"]


def test_a_block_that_raises_is_still_timed_and_the_error_passes_through() -> None:
    metrics: dict[str, float] = {}
    with pytest.raises(ValueError, match="boom"), timed("train", metrics):
        raise ValueError("boom")
    assert metrics["time/train_s"] >= 0


def test_without_metrics_only_the_span_reports() -> None:
    with timed("eval") as span:
        pass
    assert span.seconds >= 0
