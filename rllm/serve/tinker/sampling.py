"""Sampling for the Tinker service: one ``LocalEngine`` per set of weights a client saved for sampling.

``save_weights_for_sampler`` snapshots a model's weights; a sampling client on that path must sample
from exactly those weights, while the model trains on. Each snapshot therefore gets its own engine: a
copy of the base model with the adapter merged into the adapted layers (``LocalBackend``'s merged
weights, the same ones the trainer syncs into its own engine). Copies cost memory, so each trained model
keeps its ``max_per_model`` most recently used snapshots; sampling an evicted one fails with a message
that says to save it again. Sampling the base model (no adapter) uses the base engine itself.
"""

from __future__ import annotations

import asyncio
import copy
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from pydantic import ValidationError

from rllm.inference.base import SamplingParams
from rllm.inference.local import LocalEngine
from rllm.serve.tinker.wire import SampledSequence, encode_sample_response
from rllm.serve.tinker.worker import RequestError

# Tinker's max_tokens may be left out; then a completion may run to the end of the context, capped here.
DEFAULT_MAX_TOKENS = 512


class SamplerGoneError(RequestError):
    """The weights behind a sampling path were evicted (or never saved on this server)."""


@dataclass
class _Snapshot:
    model_id: str
    engine: LocalEngine


class SamplerPool:
    """The base engine and an LRU of snapshot engines per trained model. Thread-safe: snapshots are added
    from model worker threads and looked up from the event loop."""

    def __init__(self, base: LocalEngine, *, max_per_model: int) -> None:
        if max_per_model < 1:
            raise ValueError(f"max_per_model must be >= 1, got {max_per_model}")
        self.base = base
        self.max_per_model = max_per_model
        self._snapshots: OrderedDict[str, _Snapshot] = OrderedDict()
        self._evicted: set[str] = set()
        self._lock = threading.Lock()

    def add(self, path: str, model_id: str, merged: list[tuple[str, torch.Tensor]]) -> None:
        """Make ``path`` sample from the base weights with ``merged`` loaded over them (a model's worker
        thread calls this), evicting that model's least recently used snapshot beyond the limit."""
        model = copy.deepcopy(self.base.model)
        engine = LocalEngine(model, self.base.tokenizer, max_batch_rows=self.base.max_batch_rows)
        engine.load_weights(merged, version=0)
        with self._lock:
            self._snapshots.pop(path, None)
            self._snapshots[path] = _Snapshot(model_id, engine)
            self._evicted.discard(path)
            own = [p for p, s in self._snapshots.items() if s.model_id == model_id]
            for old in own[: max(0, len(own) - self.max_per_model)]:
                del self._snapshots[old]
                self._evicted.add(old)

    def engine(self, path: str | None) -> LocalEngine:
        """The engine for a ``tinker://`` path (most recently used from now on); None is the base model."""
        if path is None:
            return self.base
        with self._lock:
            snap = self._snapshots.get(path)
            if snap is not None:
                self._snapshots.move_to_end(path)
                return snap.engine
            if path in self._evicted:
                raise SamplerGoneError(
                    f"sampler weights {path} were evicted (the server keeps {self.max_per_model} per model: "
                    "rllm serve tinker --max-samplers): save them again with save_weights_for_sampler"
                )
        raise SamplerGoneError(
            f"no sampler weights at {path} on this server: save them with save_weights_for_sampler"
        )

    def has(self, path: str) -> bool:
        with self._lock:
            return path in self._snapshots

    def drop_model(self, model_id: str, *, only_prefix: str = "") -> None:
        """Forget ``model_id``'s snapshots (those whose path starts with ``only_prefix``)."""
        with self._lock:
            for path in [
                p for p, s in self._snapshots.items() if s.model_id == model_id and p.startswith(only_prefix)
            ]:
                del self._snapshots[path]


def engine_params(sp: dict[str, Any], num_samples: int, prompt_len: int, max_context: int) -> SamplingParams:
    """rllm ``SamplingParams`` for Tinker's ``SamplingParams`` (as the request's JSON dict).

    ``stop``: a string or strings stop on text, token ids stop on those tokens, ``[]`` turns off the stop
    on eos (``None``: stop on eos only). ``top_k=-1`` is off (rllm's 0). ``max_tokens`` defaults to the rest
    of the context, at most ``DEFAULT_MAX_TOKENS``.
    """
    room = max_context - prompt_len
    if room < 1:
        raise RequestError(f"the prompt has {prompt_len} tokens; the model's context is {max_context}")
    stop = sp.get("stop")
    strings: list[str] = []
    token_ids: list[int] = []
    if isinstance(stop, str):
        strings = [stop]
    elif stop is not None:
        strings = [s for s in stop if isinstance(s, str)]
        token_ids = [int(s) for s in stop if not isinstance(s, str)]
    max_tokens = sp.get("max_tokens")
    top_k = int(sp.get("top_k", -1))
    try:
        return SamplingParams(
            n=num_samples,
            temperature=float(sp.get("temperature", 1.0)),
            top_p=float(sp.get("top_p", 1.0)),
            top_k=max(top_k, 0),
            max_tokens=min(room, DEFAULT_MAX_TOKENS) if max_tokens is None else min(int(max_tokens), room),
            stop=strings,
            stop_token_ids=token_ids,
            ignore_eos=stop is not None and len(stop) == 0,
            seed=sp.get("seed"),
        )
    except ValidationError as exc:
        err = exc.errors()[0]
        raise RequestError(f"sampling_params.{'.'.join(map(str, err['loc']))}: {err['msg']}") from None


@torch.inference_mode()
def prompt_logprobs(engine: LocalEngine, prompt: Sequence[int]) -> list[float | None]:
    """log p(prompt[i] | prompt[:i]) for every prompt token, None for the first (no context)."""
    ids = torch.tensor([list(prompt)], device=engine.device)
    logits = engine.model(input_ids=ids, use_cache=False).logits[0, :-1].float()
    lp = torch.log_softmax(logits, dim=-1).gather(1, ids[0, 1:].unsqueeze(1)).squeeze(1)
    return [None, *lp.tolist()]


async def sample(
    engine: LocalEngine,
    prompt: list[int],
    num_samples: int,
    sampling_params: dict[str, Any],
    *,
    max_context: int,
    with_prompt_logprobs: bool,
) -> bytes:
    """Tinker's ``asample`` result (a ``SampleResponse`` protobuf): ``num_samples`` completions of
    ``prompt`` with per-token logprobs and stop reasons, and the prompt's logprobs when asked."""
    if not prompt:
        raise RequestError("the prompt is empty")
    vocab = engine.model.config.vocab_size
    if min(prompt) < 0 or max(prompt) >= vocab:
        raise RequestError(f"the prompt has a token id outside the vocabulary (0 .. {vocab - 1})")
    params = engine_params(sampling_params, num_samples, len(prompt), max_context)
    completions = await engine.generate(prompt, params)
    prompt_lp = await asyncio.to_thread(prompt_logprobs, engine, prompt) if with_prompt_logprobs else None
    sequences = [
        SampledSequence(c.completion_ids, c.logprobs, "stop" if c.finish_reason == "stop" else "length")
        for c in completions
    ]
    return encode_sample_response(sequences, prompt_lp)
