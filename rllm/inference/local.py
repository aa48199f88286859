"""The local inference engine: batched sampling from a Hugging Face causal LM with a KV cache.

Concurrent ``generate`` calls (hundreds of in-flight episodes, from any event loop) are queued and one
decode thread runs them with **continuous batching**: rows join the running batch between decode steps
(the newcomers are prefilled as a batch of their own, then their KV cache is merged into the running one)
and leave it the step they finish (eos, stop, ``max_tokens``, or their caller cancelled), their caller
woken at once, so the batch stays full without waiting for its slowest row. Rows of different lengths
share the batch left-padded, with per-row position ids; :mod:`rllm.inference.decode_batch` holds the batch
and its cache layout. At most ``max_batch_rows`` rows decode together; the rest wait for a free place.

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
import atexit
import logging
import threading
import time
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

from rllm.inference.base import (
    Completion,
    EngineBase,
    EngineCapabilities,
    SamplingParams,
    WeightSyncError,
)
from rllm.inference.cpu_kernels import Fp32Gemm, cpu_lacks_native_half, use_gqa_decode_attention
from rllm.inference.decode_batch import DecodeBatch, left_pad, new_cache
from rllm.inference.devices import pick_device, pick_dtype
from rllm.inference.grammar import Grammar, GrammarMatcher
from rllm.inference.multi_lora import AdapterSet, AdapterTensors
from rllm.inference.sampling import sample_tokens
from rllm.inference.small_gemm import SmallBatchLinears
from rllm.inference.small_gemm import install as install_small_gemm
from rllm.utils.allocator import pin_mmap_threshold
from rllm.utils.openmp import release_openmp_threads

logger = logging.getLogger(__name__)


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
        pin_mmap_threshold()  # `rllm eval` and `rllm serve` sample in-process too (rllm.utils.allocator)
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
        self._closing = False  # close() asked the decode thread to exit once it has no row left
        self._weights_lock = threading.Lock()
        self._swap = threading.Event()  # set while load_weights waits: the running batch pauses
        # batches: continuous batches started (one lasts while rows keep it busy); joins: times rows joined a
        # running batch between decode steps (joined_rows of them); rows: rows prefilled (again on resume),
        # shared_prefill_rows of them copied from another row of the same tokens instead of computed.
        counts = (
            "batches",
            "joins",
            "joined_rows",
            "rows",
            "shared_prefill_rows",
            "decode_steps",
            "generated_tokens",
        )
        self.stats: dict[str, float] = {**dict.fromkeys(counts, 0), "decode_s": 0.0}
        self._adapters: AdapterSet | None = None  # set by the first load_adapters
        self._merged_loaded = False  # load_weights was called: adapters are refused from then on
        self.context_length: int | None = getattr(model.config, "max_position_embeddings", None)
        # CPU kernel choices that keep the computation (rllm.inference.cpu_kernels): fp32 GEMMs for a
        # half-precision model on a CPU without native support for it, decode attention that reads
        # grouped key/value heads without copying the cache, and a float32 model's decode-step products
        # of 3-8 rows through a GEMM written for few rows (rllm.inference.small_gemm).
        self._fp32_gemm: Fp32Gemm | None = None
        self.small_gemm: SmallBatchLinears | None = None
        if self.device.type == "cpu":
            dtype = next(model.parameters()).dtype
            if dtype in (torch.bfloat16, torch.float16) and cpu_lacks_native_half(dtype):
                self._fp32_gemm = Fp32Gemm(model)
            if dtype == torch.float32:
                self.small_gemm = install_small_gemm(model)
            use_gqa_decode_attention(model)

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
        release_openmp_threads()  # this thread now waits: the decode thread gets the cores (rllm.utils.openmp)
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
                    if isinstance(tensor, torch.Tensor):
                        target.copy_(tensor.to(dtype=target.dtype, device=target.device))
                    else:  # a WeightWriter (rllm.inference.base), e.g. a LoRA merge computed into target
                        tensor.write_into(target)
                if self._fp32_gemm is not None:
                    self._fp32_gemm.refresh()
                self.weight_version = self.weight_version + 1 if version is None else version
        finally:
            self._swap.clear()
        self._ensure_worker()  # rows a pause put back wait for the decode thread

    # ------------------------------------------------------------------ worker
    def _ensure_worker(self) -> None:
        """Wake the decode thread (starting it if it is not running) to take the pending rows."""
        with self._cond:
            if self._thread is None:
                self._closing = False
                self._thread = threading.Thread(target=self._worker_main, name="rllm-engine", daemon=True)
                self._thread.start()
                _running_engines.add(self)
            self._cond.notify()

    def close(self, timeout_s: float = 5.0) -> None:
        """Let the decode thread finish the rows it has and exit now rather than after its 5 s idle wait
        (the engine starts a new one on the next request). Called for every engine at interpreter exit: a
        daemon thread that has run torch ops and is still alive while the interpreter tears torch down can
        abort the process ("terminate called without an active exception")."""
        with self._cond:
            self._closing = True
            thread = self._thread
            self._cond.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)

    def _worker_main(self) -> None:
        """The decode thread: runs a continuous batch whenever rows are pending, and resolves each row's future
        on the event loop that awaits it as soon as the row finishes. A thread, not an asyncio task, so
        callers on several loops (the trainer's per-step loops, an embedded gateway's thread) share one
        engine; it exits after 5 s idle."""
        while True:
            with self._cond:
                while not self._pending:
                    if self._closing or (not self._cond.wait(timeout=5.0) and not self._pending):
                        self._thread = None  # under the lock: a caller that appends now starts a new thread
                        return
            self._wait_for_arrivals()
            while self._swap.is_set():  # a weight swap is waiting for the lock: let it have it first
                time.sleep(0.001)
            self._run_batch()
            if not self._pending:  # idle: its OpenMP workers go, for the trainer's (rllm.utils.openmp)
                release_openmp_threads()

    def _wait_for_arrivals(self) -> None:
        """Rows submitted together (an asyncio.gather of episodes, or HTTP calls a few ms apart) arrive over a
        short while: before a batch starts, wait until none has arrived for a window, so they share its
        prefill (rows that come later join the running batch between decode steps)."""
        window = max(self.batch_wait_s, 0.0005)
        for _ in range(20):  # at most 20 windows, so a steady trickle cannot hold the batch back
            seen = len(self._pending)
            if seen >= self.max_batch_rows:
                return
            time.sleep(window)
            if len(self._pending) == seen:
                return

    @torch.inference_mode()
    def _run_batch(self) -> None:
        """One continuous batch: admit the pending rows, then decode step by step, admitting newcomers between
        steps and letting finished rows leave, until no row is left or a weight swap pauses the batch."""
        with self._weights_lock:
            t0 = time.perf_counter()
            try:
                batch = self._admit(None)
                while batch is not None:
                    try:
                        batch = self._decode_step(batch)
                        if batch is not None:  # an empty batch ends here: the next waits for arrivals first
                            batch = self._admit(batch)
                    except Exception as exc:  # a failed step fails its batch's requests, never the engine
                        logger.exception("decode step failed")
                        for r in batch.rows:
                            _resolve(r, exc)
                        return
            finally:
                self.stats["decode_s"] += time.perf_counter() - t0

    def _take_pending(self, room: int) -> list[_Row]:
        with self._cond:
            # A request cancelled while it waited (its episode timed out) is not worth decoding.
            self._pending = [r for r in self._pending if not r.done.done()]
            taken = self._pending[:room]
            self._pending = self._pending[room:]
        return taken

    def _admit(self, batch: DecodeBatch | None) -> DecodeBatch | None:
        """Prefill the pending rows that fit (``max_batch_rows``) and merge them into the running ``batch``
        (or start one with them). Admits nothing while a weight swap waits: the batch is about to pause."""
        if self._swap.is_set():
            return batch
        newcomers = self._take_pending(self.max_batch_rows - (len(batch) if batch is not None else 0))
        if not newcomers:
            return batch
        try:
            joined = self._prefill(newcomers)
        except Exception as exc:  # a failed prefill fails its own rows; the running batch goes on
            logger.exception("prefill failed")
            for r in newcomers:
                _resolve(r, exc)
            return batch
        if batch is None:
            self.stats["batches"] += 1
            return joined
        try:
            batch.merge(joined)
        except Exception as exc:  # the newcomers fail with the batch (the caller fails its rows)
            for r in newcomers:
                _resolve(r, exc)
            raise
        self.stats["joins"] += 1
        self.stats["joined_rows"] += len(newcomers)
        return batch

    def _prefill(self, rows: list[_Row]) -> DecodeBatch:
        """Run ``rows`` (prompt plus any tokens sampled before a pause) through the model as a batch of their
        own, left-padded; returns them as a :class:`DecodeBatch` ready to sample their next token.

        Rows with the same tokens and adapter (a GRPO group's completions of one prompt arrive together) are
        prefilled once: the shared row's KV cache, logits and positions are copied to each of them, and each
        samples on from there with its own generator (``stats["shared_prefill_rows"]`` counts the copies)."""
        for r in rows:
            if r.weight_version < 0:
                r.weight_version = self.weight_version
            r.last_weight_version = self.weight_version
        dev = self.device
        unique: list[_Row] = []  # the first row of each (adapter, tokens), prefilled
        first: dict[tuple[str | None, tuple[int, ...]], int] = {}  # (adapter, tokens) -> its place in unique
        owner = []  # each row's place in unique
        for r in rows:
            key = (r.adapter, tuple(r.prompt_ids + r.out_ids))
            if key not in first:
                first[key] = len(unique)
                unique.append(r)
            owner.append(first[key])
        input_ids, attn, position_ids = left_pad([r.prompt_ids + r.out_ids for r in unique], self.pad_id, dev)
        # Each row's adapter slot (0: none). Rows only ever read their own KV-cache row, so rows of
        # different adapters share a batch but no state.
        self._adapter_rows(unique)
        cache = new_cache()
        out = self.model(
            input_ids=input_ids,
            attention_mask=attn,
            position_ids=position_ids,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        logits_BV = out.logits[:, -1, :]
        if len(unique) < len(rows):
            idx = torch.tensor(owner, dtype=torch.long, device=dev)
            cache.batch_select_indices(idx)  # a copy of the shared row's keys and values for each row
            attn, position_ids, logits_BV = attn[idx], position_ids[idx], logits_BV[idx]
            self.stats["shared_prefill_rows"] += len(rows) - len(unique)
        self.stats["rows"] += len(rows)
        return DecodeBatch(
            rows=rows,
            cache=cache,
            attn_BT=attn,
            next_pos_B1=position_ids[:, -1:] + 1,
            logits_BV=logits_BV,
            temperature_B=torch.tensor([r.params.temperature for r in rows], device=dev),
            top_k_B=torch.tensor([r.params.top_k for r in rows], device=dev),
            top_p_B=torch.tensor([r.params.top_p for r in rows], device=dev),
            slots_B=self._adapter_rows(rows),
        )

    def _decode_step(self, batch: DecodeBatch) -> DecodeBatch | None:
        """Sample one token for every row of ``batch``, resolve the rows that finished, and run the forward pass
        that gives the others their next logits. Returns the batch, or None once it has no row left or a
        weight swap paused it (its unfinished rows, tokens kept, go back to the head of the queue)."""
        tokens_B, logprobs_B = sample_tokens(
            batch.logits_BV,
            batch.temperature_B,
            batch.top_k_B,
            batch.top_p_B,
            [r.generator for r in batch.rows],
            self._allowed(batch.rows, batch.logits_BV.shape[-1]),
        )
        keep: list[int] = []
        for pos, (r, tok, lp) in enumerate(zip(batch.rows, tokens_B.tolist(), logprobs_B.tolist())):
            if self._append_token(r, tok, lp):
                _resolve(r, None)
            elif not r.done.done():  # a row whose caller gave up (cancelled) leaves the batch
                keep.append(pos)
        self.stats["generated_tokens"] += len(batch)
        if not keep:
            return None
        if self._swap.is_set():  # checked after a token, so every batch makes progress
            self._pause([batch.rows[pos] for pos in keep])
            return None
        batch.select(keep)
        self._forward(batch, tokens_B[keep])
        return batch

    def _append_token(self, r: _Row, tok: int, logprob: float) -> bool:
        """The one place a sampled token joins its row: append it and its logprob, and say whether the row is
        now finished (eos, a stop token or string, or ``max_tokens``; ``finish_reason`` and ``text`` set)."""
        r.out_ids.append(tok)
        r.out_logprobs.append(logprob)
        if (
            self._advance(r, tok)
            or tok in self.eos_ids
            and not r.params.ignore_eos
            or tok in r.params.stop_token_ids
            or r.params.stop
            and self._hit_stop(r)
        ):
            r.finish_reason = "stop"
        elif len(r.out_ids) >= r.params.max_tokens:
            r.finish_reason = "length"
        else:
            return False
        if r.text is None:
            r.text = self.tokenizer.decode(r.out_ids, skip_special_tokens=True)
        return True

    def _forward(self, batch: DecodeBatch, tokens_B: torch.Tensor) -> None:
        """One decode step: feed each row its latest token, growing the cache by one column."""
        batch.attn_BT = torch.cat([batch.attn_BT, batch.attn_BT.new_ones((len(batch), 1))], dim=1)
        self._adapter_rows(slots=batch.slots_B)
        out = self.model(
            input_ids=tokens_B.unsqueeze(1),
            attention_mask=batch.attn_BT,
            position_ids=batch.next_pos_B1,
            past_key_values=batch.cache,
            use_cache=True,
        )
        batch.logits_BV = out.logits[:, -1, :]
        batch.next_pos_B1 = batch.next_pos_B1 + 1
        self.stats["decode_steps"] += 1

    def _pause(self, rows: list[_Row]) -> None:
        """Put rows a weight swap interrupted back at the head of the queue, first in line for the next batch
        (under the new weights), their tokens so far kept."""
        for r in rows:
            r.pauses += 1
        with self._cond:
            self._pending[:0] = rows

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


_running_engines: weakref.WeakSet[LocalEngine] = weakref.WeakSet()


@atexit.register
def _close_running_engines() -> None:
    """At interpreter exit, end every engine's decode thread before torch is torn down (see ``close``)."""
    for engine in list(_running_engines):
        engine.close(timeout_s=2.0)


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
