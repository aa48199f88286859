"""Token-faithful multi-turn assembly: a session's traces → the Steps a trajectory trains on.

An agent that talks to the model over several turns makes one call per turn. When call k+1's prompt is
exactly call k's prompt + call k's sampled completion + some new tokens (the tool result, the user's next
message, the template's turn markers), the calls form **one** training sequence::

    prompt_ids   = call 1's prompt
    response_ids = completion 1 + new tokens 1→2 + completion 2 + ...
    response_mask=      1…1     +     0…0       +    1…1
    logprobs     = sampled lps  +     0.0…      + sampled lps

so the model's own tokens are trained on once, in the context they were sampled in, and tokens the model
did not produce are masked out: the new tokens between calls, and inside a completion the tokens the gateway's
grammar forced (the only token it allowed: a forced tool call's fixed text, ``Trace.completion_mask`` 0).
A call whose prompt does not extend an earlier sequence starts a new one.
When its prompt *does* contain an earlier prompt but then differs inside the earlier completion, the chat
template re-rendered the history differently from what the model produced ("template drift"): the
sequence is split there, counted in ``assembly/drift_splits`` and logged with the first differing
position, and never silently mis-aligned.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from rllm.types import Step, Trace, Trajectory

logger = logging.getLogger(__name__)


@dataclass
class _Open:
    """A sequence being assembled: the tokens so far and the per-token training data."""

    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    last: Trace | None = None
    calls: int = 0
    oldest: int | None = None  # the weight versions of its first and last sampled token (async training)
    newest: int | None = None
    drift_at: list[int] = field(default_factory=list)

    @property
    def tokens(self) -> list[int]:
        return self.prompt_ids + self.response_ids

    def extend(self, trace: Trace) -> None:
        new = trace.prompt_token_ids[len(self.tokens) :]
        self.response_ids += new + trace.completion_token_ids
        # Tokens the gateway's grammar forced (a tool call's fixed text ...) were not sampled: mask 0.
        self.mask += [0] * len(new) + trace.sampled_mask
        self.logprobs += [0.0] * len(new) + list(trace.logprobs)
        self.last = trace
        self.calls += 1
        first, last = trace.weight_version, trace.last_weight_version or trace.weight_version
        self.oldest = first if self.oldest is None else min(self.oldest, first)
        self.newest = last if self.newest is None else max(self.newest, last)

    def to_step(self) -> Step:
        t = self.last
        assert t is not None
        messages = list(t.request.get("messages") or [])
        info: dict[str, Any] = {"calls": self.calls, "trace_id": t.trace_id, "session_id": t.session_id}
        if self.drift_at:
            info["drift_at"] = self.drift_at
        oldest = t.weight_version if self.oldest is None else self.oldest
        if self.newest is not None and self.newest != oldest:  # sampled under more than one version
            info["last_weight_version"] = self.newest
        return Step(
            prompt_ids=self.prompt_ids,
            response_ids=self.response_ids,
            logprobs=self.logprobs,
            response_mask=self.mask,
            messages=messages,
            response_text=t.response_text,
            finish_reason=t.finish_reason,
            weight_version=oldest,
            info=info,
        )


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def assemble_steps(traces: list[Trace], *, merge: bool = True) -> tuple[list[Step], dict[str, float]]:
    """Turn one role's traces (in call order) into Steps, merging calls that extend each other.

    ``merge=False`` keeps one step per call. Untrainable traces (an upstream that gave no token ids) are
    skipped and counted. Returns the steps and ``assembly/*`` counters.
    """
    metrics = {
        "assembly/calls": 0.0,
        "assembly/merged_calls": 0.0,
        "assembly/drift_splits": 0.0,
        "assembly/untrainable_calls": 0.0,
    }
    sequences: list[_Open] = []
    for trace in traces:
        metrics["assembly/calls"] += 1
        if not trace.trainable:
            metrics["assembly/untrainable_calls"] += 1
            continue
        target, drift = None, None
        if merge:
            # The newest sequence this call continues (with n > 1 the agent picks one of several choices).
            for seq in reversed(sequences):
                tokens = seq.tokens
                common = _common_prefix(tokens, trace.prompt_token_ids)
                if common == len(tokens):
                    target = seq
                    break
                if (
                    drift is None
                    and common >= len(seq.prompt_ids)
                    and len(trace.prompt_token_ids) > len(seq.prompt_ids)
                ):
                    drift = (seq, common)
        if target is not None:
            target.extend(trace)
            metrics["assembly/merged_calls"] += 1
            continue
        seq = _Open(prompt_ids=list(trace.prompt_token_ids))
        seq.extend(trace)
        if drift is not None:
            metrics["assembly/drift_splits"] += 1
            prev, pos = drift
            seq.drift_at = [pos]
            logger.warning(
                "chat-template drift in session %s: call %s re-renders the history differently from the tokens "
                "the model produced, first at token %d (expected %s, got %s); starting a new training sequence "
                "(run `rllm check-template MODEL` to inspect the template)",
                trace.session_id,
                trace.request_id,
                pos,
                prev.tokens[pos : pos + 5],
                trace.prompt_token_ids[pos : pos + 5],
            )
        sequences.append(seq)
    return [s.to_step() for s in sequences], metrics


def traces_to_trajectories(
    traces: list[Trace], *, root_session: str, merge: bool = True
) -> tuple[list[Trajectory], dict[str, float]]:
    """Group an episode's traces by role and assemble each. The root session's calls form the ``default``
    trajectory; a sub-session ``{root}:{role}`` forms the trajectory named ``role``."""
    by_role: dict[str, list[Trace]] = {}
    for t in traces:
        role = "default" if t.session_id == root_session else t.session_id[len(root_session) + 1 :]
        by_role.setdefault(role, []).append(t)
    trajectories, totals = [], {}
    for role, role_traces in by_role.items():
        steps, m = assemble_steps(role_traces, merge=merge)
        for k, v in m.items():
            totals[k] = totals.get(k, 0.0) + v
        if steps:
            trajectories.append(Trajectory(name=role, steps=steps))
    return trajectories, totals
