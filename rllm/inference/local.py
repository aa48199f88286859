"""The local inference engine: batched sampling from a Hugging Face causal LM with a KV cache.

Concurrent ``generate`` calls (hundreds of in-flight episodes, from any event loop) are queued and one
decode thread runs them together: every pending row joins the next batch, the batch is prefilled once
(left-padded), then decoded step by step with a shared KV cache; rows that finish are pruned from the
cache so the batch shrinks instead of computing padding. Requests that arrive while a batch runs join the
next one.

Decoding is interruptible: :meth:`LocalEngine.load_weights` asks the running batch to pause, the decode
thread puts its unfinished rows back at the head of the queue (their tokens so far kept), the weights are
swapped, and the rows resume from their prefix (prompt plus the tokens sampled so far, prefilled again)
under the new weights: a partial rollout. Each token's logprob is the one its own weights gave it, and a
completion records the version of its first token (``weight_version``, the oldest: what staleness is
measured from) and of its last (``last_weight_version``).

The engine owns its own copy of the weights (bf16 where the hardware supports it). After each optimizer
step the trainer calls :meth:`LocalEngine.load_weights`, which bumps ``weight_version``; every
completion records the version that produced it.

Several LoRA adapters at once (``capabilities.adapters``): :meth:`LocalEngine.load_adapters` keeps the base
weights unmerged and adds named adapters (:mod:`rllm.inference.multi_lora`); ``generate(adapter=name)``
samples with one, and a decode batch mixes rows of different adapters (each row's delta is its own; rows
never share KV-cache state, whatever their adapter). An engine serves either merged weights
(``load_weights``) or adapters (``load_adapters``), not both: the second kind is refused.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel
from transformers.cache_utils import DynamicCache

from rllm.inference.base import (
    Completion,
    EngineBase,
    EngineCapabilities,
    SamplingParams,
    WeightSyncError,
)
from rllm.inference.grammar import Grammar, GrammarMatcher
from rllm.inference.multi_lora import AdapterSet, AdapterTensors
from rllm.inference.sampling import sample_tokens

logger = logging.getLogger(__name__)


def pick_device(device: str = "auto") -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def pick_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """``auto`` is bf16 where the hardware runs it natively (CUDA with bf16, CPUs with AVX512-BF16/AMX),
    else float32."""
    if dtype == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.bfloat16 if torch.ops.mkldnn._is_mkldnn_bf16_supported() else torch.float32
    try:
        return {
            "bfloat16": torch.bfloat16,
            "bf16": torch.bfloat16,
            "float16": torch.float16,
            "fp16": torch.float16,
            "float32": torch.float32,
            "fp32": torch.float32,
        }[dtype]
    except KeyError:
        raise ValueError(f"unknown dtype {dtype!r}: use auto, bfloat16, float16 or float32") from None


def left_pad(
    rows: list[list[int]] | list[tuple[int, ...]], pad_id: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Left-pad token rows into ``(input_ids, attention_mask, position_ids)``, each ``[B, max_len]``, with
    positions counting from 0 at each row's first real token (the layout a KV-cache prefill needs)."""
    max_len = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), max_len), pad_id, dtype=torch.long)
    attn = torch.zeros((len(rows), max_len), dtype=torch.long)
    for i, r in enumerate(rows):
        input_ids[i, max_len - len(r) :] = torch.tensor(r, dtype=torch.long)
        attn[i, max_len - len(r) :] = 1
    input_ids, attn = input_ids.to(device), attn.to(device)
    return input_ids, attn, (attn.cumsum(-1) - 1).clamp(min=0)


@dataclass
class _Row:
    """One sequence being sampled: a request with n > 1 becomes n rows."""

    prompt_ids: list[int]
    params: SamplingParams
    generator: torch.Generator
    done: asyncio.Future
    loop: asyncio.AbstractEventLoop
    out_ids: list[int] = field(default_factory=list)
    out_logprobs: list[float] = field(default_factory=list)
    finish_reason: str | None = None
    text: str | None = None  # set early only when a stop string cut it
    weight_version: int = -1  # the version of its first token (a sync may land before the caller wakes)
    last_weight_version: int = -1  # the version of its latest token (differs once a sync paused the row)
    pauses: int = 0  # times a weight sync paused this row mid-decode
    constraint: GrammarMatcher | None = None  # the row's place in its grammar (constrained decoding)
    adapter: str | None = None  # the LoRA adapter it samples with (None: no adapter)


class LocalEngine(EngineBase):
    """Samples from a Hugging Face causal LM in this process; implements ``InferenceEngine``."""

    capabilities = EngineCapabilities(
        name="local", weight_transfer="tensors", constraints=True, adapters=True
    )

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: Any,
        *,
        max_batch_rows: int = 64,
        seed: int = 0,
        batch_wait_ms: float = 0.0,
    ) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.device = next(model.parameters()).device
        self.max_batch_rows = max_batch_rows
        # Requests that come over HTTP (the gateway) arrive spread over a few milliseconds; waiting until
        # none has arrived for batch_wait_ms lets them join one batch instead of the first running alone.
        self.batch_wait_s = batch_wait_ms / 1000.0
        self.weight_version = 0
        self.eos_ids = _eos_ids(model, tokenizer)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_ids[0]
        self._seed_rng = torch.Generator().manual_seed(seed)
        self._pending: list[_Row] = []
        self._cond = threading.Condition()  # guards _pending and _thread
        self._thread: threading.Thread | None = None
        self._weights_lock = threading.Lock()
        self._swap = threading.Event()  # set while load_weights waits: the running batch pauses
        self.stats = {"batches": 0, "rows": 0, "generated_tokens": 0, "decode_s": 0.0}
        self._adapters: AdapterSet | None = None  # set by the first load_adapters
        self._merged_loaded = False  # load_weights was called: adapters are refused from then on
        self.context_length: int | None = getattr(model.config, "max_position_embeddings", None)

    @classmethod
    def from_pretrained(
        cls, path: str, *, device: str = "auto", dtype: str = "auto", **kwargs: Any
    ) -> LocalEngine:
        dev = pick_device(device)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=pick_dtype(dtype, dev)).to(dev)
        tokenizer = AutoTokenizer.from_pretrained(path)
        return cls(model, tokenizer, **kwargs)

    # ------------------------------------------------------------------ public API
    async def generate(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        *,
        session_id: str | None = None,
        constraint: Grammar | None = None,
        adapter: str | None = None,
    ) -> list[Completion]:
        """Sample ``params.n`` continuations; ``constraint`` (constrained decoding) holds each to a grammar
        (see :mod:`rllm.inference.grammar`), and each completion's ``allowed_counts`` says per token how
        many tokens the grammar allowed (1: forced). ``adapter`` names a LoRA adapter of
        :meth:`load_adapters` (None: the base weights, or the merged ones of ``load_weights``). One process
        serves every session, so ``session_id`` routes nothing here."""
        if not prompt_ids:
            raise ValueError("generate() needs at least one prompt token")
        if adapter is not None:
            if self._adapters is None:
                raise ValueError(
                    f"unknown adapter {adapter!r}: the engine has loaded none (load_adapters first)"
                )
            self._adapters.slot(adapter)  # raises ValueError naming the loaded ones
        loop = asyncio.get_running_loop()
        rows = []
        for j in range(params.n):
            gen = torch.Generator(device=self.device)
            if params.seed is not None:
                gen.manual_seed((params.seed + j) % 2**63)
            else:
                gen.manual_seed(int(torch.randint(0, 2**62, (1,), generator=self._seed_rng)))
            row = _Row(
                list(prompt_ids),
                params,
                gen,
                loop.create_future(),
                loop,
                constraint=constraint.start() if constraint is not None else None,
                adapter=adapter,
            )
            rows.append(row)
        with self._cond:
            self._pending.extend(rows)
        self._ensure_worker()
        await asyncio.gather(*(r.done for r in rows))
        return [
            Completion(
                prompt_ids=r.prompt_ids,
                completion_ids=r.out_ids,
                logprobs=r.out_logprobs,
                text=r.text or "",
                finish_reason=r.finish_reason or "length",
                weight_version=r.weight_version,
                last_weight_version=r.last_weight_version,
                pauses=r.pauses,
                allowed_counts=r.constraint.allowed_counts if r.constraint is not None else None,
            )
            for r in rows
        ]

    def generate_sync(
        self, prompt_ids: list[int], params: SamplingParams, *, adapter: str | None = None
    ) -> list[Completion]:
        return asyncio.run(self.generate(prompt_ids, params, adapter=adapter))

    @property
    def adapter_names(self) -> list[str]:
        """The LoRA adapters ``generate(adapter=...)`` can name (empty until :meth:`load_adapters`)."""
        return self._adapters.names if self._adapters is not None else []

    def load_adapters(self, adapters: AdapterTensors, *, scaling: float, version: int) -> None:
        """Add or replace the named LoRA adapters (``{adapter: {module name: (lora_A [r, in], lora_B [out, r])}}``,
        module names as in the plain Hugging Face model; delta ``scaling * B @ A``) and sample from
        ``version`` on. Adapters not named keep their tensors. The base weights stay unmerged. As
        :meth:`load_weights`, a running batch pauses at its next token and resumes under the new adapters.
        Refused (``WeightSyncError``) after ``load_weights``: one engine serves merged weights or adapters."""
        if self._merged_loaded:
            raise WeightSyncError(
                "this engine serves merged weights (load_weights was called): it cannot also serve "
                "LoRA adapters; use one engine per kind"
            )
        self._swap.set()
        try:
            with self._weights_lock, torch.no_grad():
                if self._adapters is None:
                    self._adapters = AdapterSet(self.model)
                self._adapters.load(adapters, scaling=scaling)
                self.weight_version = version
        finally:
            self._swap.clear()
        self._ensure_worker()

    def load_weights(
        self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int | None = None
    ) -> None:
        """Copy new weights in (names as in ``model.state_dict()``). A running batch pauses at its next token
        (its unfinished rows resume under the new weights), so this waits at most one decode step.
        Refused (``WeightSyncError``) once :meth:`load_adapters` was called: adapters are deltas over base
        weights this would overwrite."""
        if self._adapters is not None:
            raise WeightSyncError(
                "this engine serves LoRA adapters (load_adapters was called): merged weights would "
                "overwrite their base; sync the adapters with load_adapters instead"
            )
        self._merged_loaded = True
        params = dict(self.model.named_parameters())
        buffers = dict(self.model.named_buffers())
        self._swap.set()
        try:
            with self._weights_lock, torch.no_grad():
                for name, tensor in named_tensors:
                    target = params.get(name, buffers.get(name))
                    if target is None:
                        raise KeyError(f"engine model has no parameter {name!r}")
                    target.copy_(tensor.to(dtype=target.dtype, device=target.device))
                self.weight_version = self.weight_version + 1 if version is None else version
        finally:
            self._swap.clear()
        self._ensure_worker()  # rows a pause put back wait for the decode thread

    # ------------------------------------------------------------------ worker
    def _ensure_worker(self) -> None:
        """Wake the decode thread (starting it if it is not running) to take the pending rows."""
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(target=self._worker_main, name="rllm-engine", daemon=True)
                self._thread.start()
            self._cond.notify()

    def _worker_main(self) -> None:
        """The decode thread: takes pending rows in batches, decodes them, and resolves each row's future on
        the event loop that awaits it. A thread, not an asyncio task, so callers on several loops (the
        trainer's per-step loops, an embedded gateway's thread) share one engine; it exits after 5 s idle."""
        while True:
            with self._cond:
                while not self._pending:
                    if not self._cond.wait(timeout=5.0) and not self._pending:
                        self._thread = None  # under the lock: a caller that appends now starts a new thread
                        return
            # Rows submitted together (an asyncio.gather of episodes, or HTTP calls a few ms apart) arrive
            # over a short while: wait until none has arrived for a window, so they share one batch.
            window = max(self.batch_wait_s, 0.0005)
            for _ in range(20):  # at most 20 windows, so a steady trickle cannot starve the batch
                seen = len(self._pending)
                if seen >= self.max_batch_rows:
                    break
                time.sleep(window)
                if len(self._pending) == seen:
                    break
            while self._swap.is_set():  # a weight swap is waiting for the lock: let it have it first
                time.sleep(0.001)
            batch = self._take_batch()
            if batch:
                self._run_and_resolve(batch)

    def _run_and_resolve(self, batch: list[_Row]) -> None:
        """Decode ``batch`` and resolve its finished rows; rows a weight sync paused go back to the head of the
        queue, first in line for the next batch (under the new weights)."""
        try:
            self._run_batch(batch)
        except Exception as exc:  # a failed batch fails its requests, never the engine
            logger.exception("generation batch failed")
            for r in batch:
                _resolve(r, exc)
            return
        paused = [r for r in batch if r.finish_reason is None]
        if paused:
            with self._cond:
                self._pending[:0] = paused
        for r in batch:
            if r.finish_reason is not None:
                _resolve(r, None)

    def _take_batch(self) -> list[_Row]:
        with self._cond:
            # A request cancelled while it waited (its episode timed out) is not worth decoding.
            self._pending = [r for r in self._pending if not r.done.done()]
            batch = self._pending[: self.max_batch_rows]
            self._pending = self._pending[self.max_batch_rows :]
        return batch

    @torch.inference_mode()
    def _run_batch(self, rows: list[_Row]) -> None:
        with self._weights_lock:
            for r in rows:
                if r.weight_version < 0:
                    r.weight_version = self.weight_version
                r.last_weight_version = self.weight_version
            t0 = time.perf_counter()
            self._decode(rows)
            self.stats["decode_s"] += time.perf_counter() - t0
            self.stats["batches"] += 1
            self.stats["rows"] += len(rows)

    def _decode(self, rows: list[_Row]) -> None:
        """Decode ``rows`` until each finishes, or until a weight swap asks the batch to pause (the rows left
        unfinished keep their tokens and have ``finish_reason`` None). A row that resumes after a pause is
        prefilled with its prompt and the tokens it already has."""
        dev = self.device
        input_ids, attn, position_ids = left_pad([r.prompt_ids + r.out_ids for r in rows], self.pad_id, dev)
        temperature = torch.tensor([r.params.temperature for r in rows], device=dev)
        top_k = torch.tensor([r.params.top_k for r in rows], device=dev)
        top_p = torch.tensor([r.params.top_p for r in rows], device=dev)
        active = list(range(len(rows)))  # row index for each batch position
        # Each row's adapter slot (0: none). Rows only ever read their own KV-cache row, so rows of
        # different adapters share a batch but no state.
        slots = self._adapter_rows(rows)
        cache = DynamicCache()
        out = self.model(
            input_ids=input_ids,
            attention_mask=attn,
            position_ids=position_ids,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        logits = out.logits[:, -1, :]
        next_pos = position_ids[:, -1:] + 1
        eos = set(self.eos_ids)
        while active:
            tokens, logprobs = sample_tokens(
                logits,
                temperature,
                top_k,
                top_p,
                [rows[i].generator for i in active],
                self._allowed([rows[i] for i in active], logits.shape[-1]),
            )
            tok_list, lp_list = tokens.tolist(), logprobs.tolist()
            keep: list[int] = []
            for pos, i in enumerate(active):
                r = rows[i]
                r.out_ids.append(tok_list[pos])
                r.out_logprobs.append(lp_list[pos])
                tok = tok_list[pos]
                if (
                    self._advance(r, tok)
                    or tok in eos
                    and not r.params.ignore_eos
                    or tok in r.params.stop_token_ids
                    or r.params.stop
                    and self._hit_stop(r)
                ):
                    r.finish_reason = "stop"
                elif len(r.out_ids) >= r.params.max_tokens:
                    r.finish_reason = "length"
                else:
                    keep.append(pos)
            self.stats["generated_tokens"] += len(active)
            if not keep:
                break
            if self._swap.is_set():  # checked after a token, so every batch makes progress
                for pos in keep:
                    rows[active[pos]].pauses += 1
                break
            if len(keep) < len(active):
                idx = torch.tensor(keep, device=dev)
                cache.batch_select_indices(idx)
                attn, next_pos, tokens = attn[idx], next_pos[idx], tokens[idx]
                temperature, top_k, top_p = temperature[idx], top_k[idx], top_p[idx]
                active = [active[p] for p in keep]
                slots = self._adapter_rows(slots=slots[idx])
            attn = torch.cat([attn, attn.new_ones((len(active), 1))], dim=1)
            out = self.model(
                input_ids=tokens.unsqueeze(1),
                attention_mask=attn,
                position_ids=next_pos,
                past_key_values=cache,
                use_cache=True,
            )
            logits = out.logits[:, -1, :]
            next_pos = next_pos + 1
        for r in rows:
            if r.text is None and r.finish_reason is not None:
                r.text = self.tokenizer.decode(r.out_ids, skip_special_tokens=True)

    def _adapter_rows(
        self, rows: list[_Row] | None = None, *, slots: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Tell the adapted modules each batch row's adapter slot (0: none), from ``rows`` or ``slots``;
        returns the slots, to be pruned with the batch."""
        if slots is None:
            assert rows is not None
            adapters = self._adapters
            slots = torch.tensor(
                [adapters.slot(r.adapter) if adapters else 0 for r in rows], device=self.device
            )
        if self._adapters is not None:
            self._adapters.set_rows(slots)
        return slots

    def _allowed(self, rows: list[_Row], vocab: int) -> torch.Tensor | None:
        """The ``[B, V]`` mask of the tokens each row's grammar allows next (``None`` when no row has one)."""
        if all(r.constraint is None for r in rows):
            return None
        mask = torch.ones((len(rows), vocab), dtype=torch.bool)
        for pos, r in enumerate(rows):
            if r.constraint is not None:
                mask[pos] = torch.from_numpy(r.constraint.allowed(vocab))
        return mask.to(self.device)

    @staticmethod
    def _advance(r: _Row, token: int) -> bool:
        """Move a constrained row's grammar past the token it sampled; True once the grammar is complete
        (it ended with its eos): the row stops, whatever ``ignore_eos`` says."""
        return r.constraint is not None and r.constraint.advance(token)

    def _hit_stop(self, r: _Row) -> bool:
        """True when the decoded completion contains a stop string; the text is cut before it (OpenAI
        semantics) while the token ids keep every sampled token (token-faithful)."""
        text = self.tokenizer.decode(r.out_ids, skip_special_tokens=True)
        hits = [text.find(s) for s in r.params.stop if s and s in text]
        if not hits:
            return False
        r.text = text[: min(hits)]
        return True


def _resolve(row: _Row, exc: BaseException | None) -> None:
    """Finish a row's future on the loop that awaits it (from the decode thread)."""

    def finish() -> None:
        if not row.done.done():
            if exc is None:
                row.done.set_result(None)
            else:
                row.done.set_exception(exc)

    try:
        row.loop.call_soon_threadsafe(finish)
    except RuntimeError:  # its loop has closed: nobody is waiting any more
        pass


def _eos_ids(model: PreTrainedModel, tokenizer: Any) -> list[int]:
    ids: list[int] = []
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for v in (gen_eos, model.config.eos_token_id, tokenizer.eos_token_id):
        if v is None:
            continue
        for i in v if isinstance(v, list) else [v]:
            if i not in ids:
                ids.append(int(i))
    if not ids:
        raise ValueError("model and tokenizer define no eos token id; set generation_config.eos_token_id")
    return ids
