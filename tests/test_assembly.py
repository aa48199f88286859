"""Multi-turn assembly of traces into training steps: merge on exact token prefixes, split on drift."""

from __future__ import annotations

import logging

import pytest

from rllm.gateway.traces import Trace
from rllm.runner.assembly import assemble_steps, traces_to_trajectories


def _trace(prompt: list[int], completion: list[int], session: str = "s", **kw: object) -> Trace:
    return Trace(
        session_id=session,
        request_id=kw.pop("request_id", "r"),
        endpoint="chat.completions",  # type: ignore[arg-type]
        request={"messages": [{"role": "user", "content": str(prompt)}]},
        response_text="t",
        prompt_token_ids=prompt,
        completion_token_ids=completion,
        logprobs=[-0.1 * (i + 1) for i in range(len(completion))],
        latency_ms=1.0,
        **kw,
    )  # type: ignore[arg-type]


def test_extending_calls_merge_with_env_tokens_masked() -> None:
    t1 = _trace([1, 2, 3], [10, 11, 2])
    t2 = _trace([1, 2, 3, 10, 11, 2, 50, 51], [12, 2])  # call 1 + its completion + 2 new (tool/user) tokens
    t3 = _trace([1, 2, 3, 10, 11, 2, 50, 51, 12, 2, 60], [13])
    (step,), m = assemble_steps([t1, t2, t3])
    assert step.prompt_ids == [1, 2, 3]
    assert step.response_ids == [10, 11, 2, 50, 51, 12, 2, 60, 13]
    assert step.response_mask == [1, 1, 1, 0, 0, 1, 1, 0, 1]
    assert step.logprobs == pytest.approx([-0.1, -0.2, -0.3, 0, 0, -0.1, -0.2, 0, -0.1])
    assert step.info["calls"] == 3
    assert m["assembly/merged_calls"] == 2 and m["assembly/drift_splits"] == 0


def test_drift_splits_and_is_counted(caplog: pytest.LogCaptureFixture) -> None:
    t1 = _trace([1, 2, 3], [10, 11, 2])
    # The template re-rendered the reply as [10, 99] (e.g. stripped whitespace): differs at position 4.
    t2 = _trace([1, 2, 3, 10, 99, 2, 50], [12])
    with caplog.at_level(logging.WARNING):
        steps, m = assemble_steps([t1, t2])
    assert len(steps) == 2 and m["assembly/drift_splits"] == 1
    assert steps[1].prompt_ids == [1, 2, 3, 10, 99, 2, 50] and steps[1].info["drift_at"] == [4]
    assert "first at token 4" in caplog.text


def test_independent_calls_are_not_drift() -> None:
    a = _trace([1, 2, 3], [10])
    b = _trace([1, 2, 7], [11])  # same system prompt, another question: a new conversation
    c = _trace([1, 2, 3], [12])  # the same prompt asked again
    steps, m = assemble_steps([a, b, c])
    assert len(steps) == 3 and m["assembly/drift_splits"] == 0 and m["assembly/merged_calls"] == 0


def test_n_choices_each_continue_separately() -> None:
    c0 = _trace([1, 2], [10, 2], choice_index=0)
    c1 = _trace([1, 2], [20, 2], choice_index=1)
    nxt = _trace([1, 2, 20, 2, 5], [30])  # the agent went on with choice 1
    steps, m = assemble_steps([c0, c1, nxt])
    assert [s.response_ids for s in steps] == [[10, 2], [20, 2, 5, 30]]
    assert m["assembly/merged_calls"] == 1


def test_merge_off_and_untrainable() -> None:
    t1 = _trace([1], [2])
    t2 = _trace([1, 2, 3], [4])
    u = Trace(
        session_id="s",
        request_id="r",
        endpoint="completions",
        request={},
        response_text="x",
        prompt_token_ids=[],
        completion_token_ids=[],
        logprobs=[],
        latency_ms=1,
        trainable=False,
    )
    steps, m = assemble_steps([t1, u, t2], merge=False)
    assert len(steps) == 2 and m["assembly/untrainable_calls"] == 1


def test_roles_become_trajectories() -> None:
    traces = [
        _trace([1], [2], session="ep"),
        _trace([5], [6], session="ep:judge"),
        _trace([1, 2, 3], [4], session="ep"),
    ]
    trajs, m = traces_to_trajectories(traces, root_session="ep")
    by = {t.name: t for t in trajs}
    assert set(by) == {"default", "judge"}
    assert by["default"].steps[0].response_ids == [2, 3, 4] and by["judge"].steps[0].response_ids == [6]
    assert m["assembly/calls"] == 3
