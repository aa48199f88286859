"""Wall-clock timing of a stage of work, as one context manager (tinker-cookbook's ``scope_span`` idea).

    with timed("rollout", metrics) as span:
        episodes = run_episodes(...)
    tokens_per_s = generated / span.seconds   # metrics["time/rollout_s"] is written too

The loop names its stages and the timing bookkeeping stays out of its way: no ``perf_counter`` pairs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

logger = logging.getLogger(__name__)


class Span:
    """One timed stretch of work. ``seconds`` is the time so far while the span runs, its length after."""

    def __init__(self) -> None:
        self._start = time.perf_counter()
        self._end: float | None = None

    @property
    def seconds(self) -> float:
        end = self._end if self._end is not None else time.perf_counter()
        return end - self._start

    def _stop(self) -> None:
        self._end = time.perf_counter()


@contextmanager
def timed(name: str, metrics: dict[str, float] | None = None) -> Iterator[Span]:
    """Time the ``with`` block; when it ends (also by an exception), write ``metrics[f"time/{name}_s"]``
    and log the span at debug level.

    Without ``metrics`` no metric is written: read the yielded span's ``seconds`` (for a metric with a
    name of its own, such as ``eval/time_s``, or a rate computed inside the block).
    """
    span = Span()
    try:
        yield span
    finally:
        span._stop()
        logger.debug("%s took %.3f s", name, span.seconds)
        if metrics is not None:
            metrics[f"time/{name}_s"] = span.seconds
