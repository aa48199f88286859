"""From rllm's data model to store rows: which episodes of a step are kept, and what each one becomes.

Pure functions (no database): :func:`sample_episodes` picks a step's episodes to keep and
:func:`episode_record` turns one :class:`~rllm.types.Episode` into the rows the writer inserts, with token
arrays packed and every value JSON-safe (non-finite floats become null).
"""

from __future__ import annotations

import json
import math
import os
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from rllm.types import Episode, Step

# Where the trainer leaves the trainer-side logprobs of a step's response tokens (set by
# rllm.algorithms.transforms.attach_trainer_logprobs when the backend recomputes them).
TRAINER_LOGPROBS = "trainer_logprobs"
PREVIEW_CHARS = 200


class Tokenizer(Protocol):
    """What the store needs of a tokenizer (a Hugging Face one fits): token ids to text."""

    def decode(self, ids: list[int]) -> str: ...


def sample_episodes(episodes: Sequence[Episode], k: int) -> list[Episode]:
    """The episodes of one step worth keeping: ``k`` chosen evenly across groups (task ids), plus every
    failed, timed-out or truncated one. Order is the input's.

    Groups take turns giving one episode; within a group the highest and lowest rewards alternate, so a
    kept group shows both what worked and what did not.
    """
    always = {id(e) for e in episodes if e.failed or e.truncated}
    groups: dict[str, list[Episode]] = {}
    for e in episodes:
        if id(e) not in always:
            groups.setdefault(e.task_id, []).append(e)
    queues = [deque(_high_low(members)) for members in groups.values()]
    chosen: set[int] = set()
    while len(chosen) < k and any(queues):
        for queue in queues:
            if queue and len(chosen) < k:
                chosen.add(id(queue.popleft()))
    return [e for e in episodes if id(e) in chosen or id(e) in always]


def _high_low(members: list[Episode]) -> list[Episode]:
    ranked = sorted(members, key=lambda e: -(e.reward or 0.0))  # stable: ties keep sampling order
    out = []
    while ranked:
        out.append(ranked.pop(0))
        if ranked:
            out.append(ranked.pop())
    return out


# ----------------------------------------------------------------------------------------- records


@dataclass
class StepTokens:
    """One LLM call's token arrays, packed for the ``episode_steps`` table."""

    trajectory: int
    step: int
    prompt_ids: bytes
    response_ids: bytes
    logprobs: bytes
    trainer_logprobs: bytes | None
    mask: bytes
    advantage: float | None
    drift_at: int | None


@dataclass
class EpisodeRecord:
    """Everything the store keeps of one episode: the browser's columns, the detail JSON, the tokens."""

    id: str
    step: int
    task_id: str
    reward: float | None
    is_correct: int | None
    termination_reason: str
    error: str | None
    roles: list[str]
    n_steps: int
    preview: str
    detail: dict[str, Any]
    search_text: str
    tokens: list[StepTokens] = field(default_factory=list)
    token_ids: set[int] = field(default_factory=set)


def episode_record(episode: Episode, step: int, tokenizer: Tokenizer | None = None) -> EpisodeRecord:
    """The store's form of ``episode`` sampled at training step ``step``.

    ``tokenizer`` renders a prompt that came without chat messages (a raw completion call) and a response
    without text; without it those show as empty.
    """
    trajectories, tokens, token_ids, responses = [], [], set(), []
    for ti, traj in enumerate(episode.trajectories):
        steps = []
        for si, s in enumerate(traj.steps):
            response = s.response_text or (
                tokenizer.decode(s.response_ids) if tokenizer and s.response_ids else ""
            )
            responses.append(response)
            steps.append(
                {
                    "index": si,
                    "messages": clean(s.messages) or _raw_prompt(s, tokenizer),
                    "response": response,
                    "reward": clean(s.reward),
                    "advantage": clean(s.advantage),
                    "finish_reason": s.finish_reason,
                    "weight_version": s.weight_version,
                    "n_prompt_tokens": len(s.prompt_ids),
                    "n_response_tokens": len(s.response_ids),
                    "info": clean({k: v for k, v in s.info.items() if k != TRAINER_LOGPROBS}),
                }
            )
            tokens.append(_step_tokens(ti, si, s))
            token_ids.update(s.prompt_ids)
            token_ids.update(s.response_ids)
        trajectories.append(
            {"name": traj.name, "reward": clean(traj.reward), "info": clean(traj.info), "steps": steps}
        )
    task = clean(episode.task)
    detail = {
        "task": task,
        "info": clean(episode.info),
        "metrics": clean(episode.metrics),
        "attempt": episode.attempt,
        "trajectories": trajectories,
    }
    return EpisodeRecord(
        id=episode.id,
        step=step,
        task_id=episode.task_id,
        reward=clean(episode.reward),
        is_correct=None if episode.is_correct is None else int(episode.is_correct),
        termination_reason=episode.termination_reason.value,
        error=episode.error,
        roles=list(dict.fromkeys(t.name for t in episode.trajectories)),
        n_steps=sum(len(t.steps) for t in episode.trajectories),
        preview=(responses[-1] if responses else "")[:PREVIEW_CHARS],
        detail=detail,
        search_text="\n".join([_question(task), *responses]),
        tokens=tokens,
        token_ids=token_ids,
    )


def _raw_prompt(step: Step, tokenizer: Tokenizer | None) -> list[dict[str, Any]]:
    """A call made with token ids only (no chat messages): its prompt, decoded, as one message."""
    if not step.prompt_ids or tokenizer is None:
        return []
    return [{"role": "user", "content": tokenizer.decode(step.prompt_ids), "raw_prompt": True}]


def token_texts(tokenizer: Tokenizer, ids: Sequence[int]) -> list[str]:
    """The text of each token of ``ids`` on its own (a byte-level token that is part of a character shows
    as the replacement character)."""
    singles = [[i] for i in ids]
    rust = getattr(tokenizer, "backend_tokenizer", None)  # a Hugging Face fast tokenizer: one native call
    if rust is not None:
        return list(rust.decode_batch(singles, skip_special_tokens=False))
    return [tokenizer.decode(one) for one in singles]


def _question(task: Any) -> str:
    if isinstance(task, dict):
        for key in ("question", "prompt", "problem", "instruction"):
            if isinstance(task.get(key), str):
                return task[key]
    return json.dumps(task)[:4000]


def _step_tokens(trajectory: int, index: int, s: Step) -> StepTokens:
    mask = s.response_mask or [1] * len(s.response_ids)
    trainer = s.info.get(TRAINER_LOGPROBS)
    drift = s.info.get("drift_at")
    if isinstance(drift, list):
        drift = drift[0] if drift else None
    return StepTokens(
        trajectory=trajectory,
        step=index,
        prompt_ids=pack_ids(s.prompt_ids),
        response_ids=pack_ids(s.response_ids),
        logprobs=pack_floats(s.logprobs),
        trainer_logprobs=pack_floats(trainer)
        if trainer is not None and len(trainer) == len(s.response_ids)
        else None,
        mask=bytes(mask),
        advantage=clean(s.advantage),
        drift_at=drift if isinstance(drift, int) else None,
    )


# ----------------------------------------------------------------------------------------- helpers


def pack_ids(ids: Sequence[int]) -> bytes:
    return np.asarray(ids, dtype="<i4").tobytes()


def unpack_ids(blob: bytes) -> list[int]:
    return np.frombuffer(blob, dtype="<i4").tolist()


def pack_floats(values: Sequence[float]) -> bytes:
    return np.asarray(values, dtype="<f4").tobytes()


def unpack_floats(blob: bytes | None) -> list[float | None] | None:
    """Float32 values back as Python floats, shortest form (-0.1, not -0.10000000149011612); -inf (a token
    the sampling filter had ruled out) and NaN become None, since JSON has neither."""
    if blob is None:
        return None
    return [float(str(v)) if math.isfinite(v) else None for v in np.frombuffer(blob, dtype="<f4")]


def clean(value: Any) -> Any:
    """``value`` as plain JSON data: non-finite floats become None, numpy scalars and arrays plain Python,
    tuples lists, and anything else JSON cannot hold its ``repr``."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if isinstance(value, np.generic):
        return clean(value.item())
    if isinstance(value, np.ndarray):
        return clean(value.tolist())
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if hasattr(value, "model_dump"):
        return clean(value.model_dump())
    if hasattr(value, "value") and isinstance(value.value, (str, int)):  # an Enum
        return value.value
    return repr(value)


def dumps(value: Any) -> str:
    return json.dumps(clean(value), ensure_ascii=False, allow_nan=False)
