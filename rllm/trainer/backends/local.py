"""The local training backend: plain PyTorch on this machine (CPU or one GPU), full fine-tune, LoRA, or one LoRA
adapter per role (the roles section: rllm.trainer.backends._adapters)."""

from __future__ import annotations

import contextlib
import logging
import random
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import AutoModelForCausalLM
from transformers.cache_utils import DynamicCache

from rllm.algorithms.logprobs import chunked_token_logprobs
from rllm.algorithms.losses import LossConfig, aggregate_loss, compute_policy_loss
from rllm.inference.local import left_pad, pick_device
from rllm.trainer.backends._adapters import RoleAdapters, add_adapters, init_adapters
from rllm.trainer.backends._lora import MergeWriter, fuse_lora_linears, layer_factors, merge_lora
from rllm.trainer.backends._rms_norm import fuse_rms_norms
from rllm.trainer.backends.base import BackendCapabilities, TrainingBackend, UnsupportedConfigError, lr_factor
from rllm.trainer.config import TrainConfig, adapter_names
from rllm.types import DEFAULT_ADAPTER, TrainBatch, TrainSequence
from rllm.utils.allocator import pin_mmap_threshold

logger = logging.getLogger(__name__)

LOCAL_CAPABILITIES = BackendCapabilities(
    name="local",
    full_finetune=True,
    lora=True,
    losses=None,  # every registered loss: compute_policy_loss runs any of them
    kl_to_reference=True,
    recompute_old_logprobs=True,
    bf16_autocast=True,
    devices=frozenset({"cpu", "cuda"}),
    adapters=True,  # the roles section: one PEFT adapter and one AdamW per role's adapter (rllm.trainer.backends._adapters)
)


def _autocast_dtype(setting: str, device: torch.device) -> torch.dtype | None:
    if setting == "none":
        return None
    supported = (
        torch.cuda.is_bf16_supported()
        if device.type == "cuda"
        else torch.ops.mkldnn._is_mkldnn_bf16_supported()
    )
    if setting == "bf16" and not supported:
        raise UnsupportedConfigError(
            f"backend.autocast=bf16 but this {device.type} has no bf16 support: set backend.autocast=none"
        )
    return torch.bfloat16 if supported else None


# backend.attn_implementation=auto on CPU: micro-batches whose rows are longer than this run SDPA attention.
LONG_ROW_TOKENS = 256


def _attn_implementation(setting: str, device: torch.device) -> str:
    """``auto``: eager attention on CPU, where torch's flash-attention backward costs more than the
    matmuls it replaces at RL sequence lengths (measured 1.5x slower training step); SDPA on GPU. On CPU a
    micro-batch of rows longer than ``LONG_ROW_TOKENS`` switches to SDPA (``LocalBackend._pick_attention``)."""
    if setting != "auto":
        return setting
    return "sdpa" if device.type == "cuda" else "eager"


def micro_batch_order(sequences: list[TrainSequence]) -> list[int]:
    """The order rows are cut into micro-batches in: length buckets, so rows of similar length share a
    micro-batch and padding stays low (SFT rows, whose prompts all differ, sort by length). Rows that share
    their prompt (a group's answers) stay together, placed by the group's longest row, so ``share_prefix``
    computes the prompt once. Order inside an optimizer step does not change the gradient."""

    def prompt(i: int) -> tuple[int, ...]:
        s = sequences[i]
        return tuple(s.input_ids[: s.loss_mask.index(1) if 1 in s.loss_mask else 0])

    prompts = [prompt(i) for i in range(len(sequences))]
    longest: dict[tuple[int, ...], int] = {}
    for p, s in zip(prompts, sequences):
        longest[p] = max(longest.get(p, 0), len(s.input_ids))
    return sorted(
        range(len(sequences)), key=lambda i: (longest[prompts[i]], prompts[i], len(sequences[i].input_ids))
    )


def cut_micro_batches(sequences: list[TrainSequence], max_rows: int, max_tokens: int) -> list[list[int]]:
    """The micro-batches of ``sequences`` (indices, in :func:`micro_batch_order`): each at most ``max_rows``
    rows and, when ``max_tokens`` > 0, at most ``max_tokens`` padded tokens (its rows times its longest
    row); a row longer than ``max_tokens`` is a micro-batch of its own. A pass keeps activations for its
    padded tokens, so the budget bounds a step's memory whatever the rows' lengths (``backend.micro_batch_tokens``).
    Every backend cuts with this one function, so a driver can count the micro-batches its ranks will run."""
    out: list[list[int]] = []
    longest = 0
    for i in micro_batch_order(sequences):
        n = len(sequences[i].input_ids)
        if (
            out
            and len(out[-1]) < max_rows
            and (max_tokens <= 0 or (len(out[-1]) + 1) * max(longest, n) <= max_tokens)
        ):
            out[-1].append(i)
            longest = max(longest, n)
        else:
            out.append([i])
            longest = n
    return out


class LocalBackend(TrainingBackend):
    """Owns the policy (fp32 master weights), the optimizer and the LR schedule."""

    capabilities = LOCAL_CAPABILITIES

    def __init__(self, cfg: TrainConfig, model_path: str, pad_id: int) -> None:
        pin_mmap_threshold()  # sft, replay and the FSDP ranks too: freed activations go back (rllm.utils.allocator)
        self.cfg = cfg
        self.device = pick_device(cfg.backend.device)
        if self.device.type not in self.capabilities.devices:
            raise UnsupportedConfigError(f"local backend runs on cpu or cuda, not {self.device.type!r}")
        self.pad_id = pad_id
        self.model_path = model_path
        self.autocast_dtype = _autocast_dtype(cfg.backend.autocast, self.device)
        torch.manual_seed(cfg.trainer.seed)
        self.lora = cfg.lora.enabled
        # With LoRA the base weights are frozen, so they need no fp32 master copy: keeping them in the
        # autocast dtype saves re-casting every weight on every forward and backward (and half the memory),
        # and matches the bf16 inference engine. Trainable weights (adapters, or everything in a full
        # fine-tune) stay float32.
        base_dtype = self.autocast_dtype if (self.lora and self.autocast_dtype is not None) else torch.float32
        attn = _attn_implementation(cfg.backend.attn_implementation, self.device)
        model = AutoModelForCausalLM.from_pretrained(model_path, dtype=base_dtype, attn_implementation=attn)
        self._reference: torch.nn.Module | None = None
        if self.lora:
            from peft import LoraConfig, get_peft_model

            peft_cfg = LoraConfig(
                r=cfg.lora.rank,
                lora_alpha=cfg.lora.alpha,
                lora_dropout=cfg.lora.dropout,
                target_modules=cfg.lora.target_modules,
                task_type="CAUSAL_LM",
            )
            model = get_peft_model(model, peft_cfg)
            # Every role's adapter, each started fresh or from its init_adapter, before sharding.
            if cfg.roles:
                add_adapters(model, adapter_names(cfg.roles))
                init_adapters(model, cfg.roles, cfg.lora)
            # Each adapted layer adds its update inside a GEMM, not in three elementwise passes (_lora.py).
            fuse_lora_linears(model)
        elif cfg.algorithm.loss.kl_coef > 0:
            # Full fine-tune needs a frozen copy for the KL term; loaded only when the term is on.
            reference = AutoModelForCausalLM.from_pretrained(
                model_path, dtype=torch.float32, attn_implementation=attn
            ).to(self.device)
            self._reference = self._wrap_model(reference.eval().requires_grad_(False))
        # Llama-style RMSNorms differentiate in one written-out backward, not op by op (_rms_norm.py).
        fuse_rms_norms(model)
        if cfg.backend.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            if self.lora:
                model.enable_input_require_grads()
        self.model = self._wrap_model(model.to(self.device))
        self.model.train()
        # roles: an adapter per role's adapter name, each with its own optimizer (rllm.trainer.backends._adapters)
        self.roles = (
            RoleAdapters(self.model, cfg, self._lr_factor, self.device.type == "cpu", self._clip_gradients)
            if cfg.roles
            else None
        )
        self.adapter_scaling = cfg.lora.alpha / cfg.lora.rank
        params = [p for p in self.model.parameters() if p.requires_grad]
        o = cfg.optim
        if self.roles is None:
            self.optimizer = torch.optim.AdamW(
                params,
                lr=o.lr,
                betas=(o.beta1, o.beta2),
                eps=o.eps,
                weight_decay=o.weight_decay,
                fused=self.device.type == "cpu" or None,
            )
            self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self._lr_factor)
        self.step = 0
        self._synced_once = False
        logger.info(
            "local backend: %s on %s, %.1fM trainable of %.1fM params, autocast=%s",
            "LoRA" if self.lora else "full fine-tune",
            self.device,
            sum(p.numel() for p in params) / 1e6,
            sum(p.numel() for p in self.model.parameters()) / 1e6,
            self.autocast_dtype,
        )

    def _wrap_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """Where a subclass shards a loaded model (the distributed backend's FSDP2 ranks) before the
        optimizer sees its parameters; the policy and the KL reference both pass through. Identity here."""
        return model

    # ------------------------------------------------------------------ schedule
    def _lr_factor(self, step: int) -> float:
        return lr_factor(self.cfg, step)

    # ------------------------------------------------------------------ tensors
    def _micro_batches(self, batch: TrainBatch) -> list[list[TrainSequence]]:
        b = self.cfg.backend
        cuts = cut_micro_batches(batch.sequences, b.micro_batch_size, b.micro_batch_tokens)
        return [[batch.sequences[i] for i in mb] for mb in cuts]

    def _pad(self, seqs: list[TrainSequence]) -> dict[str, torch.Tensor]:
        T = max(len(s.input_ids) for s in seqs)

        def padded(field: str, fill: float, dtype: torch.dtype) -> torch.Tensor:
            rows = [getattr(s, field) + [fill] * (T - len(s.input_ids)) for s in seqs]
            return torch.tensor(rows, dtype=dtype, device=self.device)

        attn = torch.tensor(
            [[1] * len(s.input_ids) + [0] * (T - len(s.input_ids)) for s in seqs], device=self.device
        )
        return {
            "input_ids": padded("input_ids", self.pad_id, torch.long),
            "attention_mask": attn,
            "loss_mask": padded("loss_mask", 0, torch.float32),
            "rollout_logprobs": padded("rollout_logprobs", 0.0, torch.float32),
            "advantages": padded("advantages", 0.0, torch.float32),
        }

    def _autocast(self) -> contextlib.AbstractContextManager:
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.autocast_dtype)

    def _response_logprobs(
        self, model: torch.nn.Module, t: dict[str, torch.Tensor], *, with_entropy: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Logprob of each trained token given its prefix, as a ``[B, T-1]`` tensor aligned with
        ``input_ids[:, 1:]`` (0 where the loss mask is 0), and the entropy there when asked.

        The vocabulary projection runs only at loss-masked positions: prompt tokens need hidden states
        but never logits, and the LM head is a fifth of a small model's compute.
        """
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        self._pick_attention(base, t["input_ids"].shape[1])
        mask = t["loss_mask"][:, 1:].bool()
        with self._autocast():
            hidden_N = self._shared_prefix_hidden(base, t) if self.cfg.backend.share_prefix else None
            if hidden_N is None:
                hidden = base.get_decoder()(
                    input_ids=t["input_ids"], attention_mask=t["attention_mask"], use_cache=False
                ).last_hidden_state
                hidden_N = hidden[:, :-1][mask]
        # The projection to the vocabulary, a chunk of tokens at a time (backend.logprob_chunk_tokens): the
        # float32 [tokens x vocab] logits are the largest tensors of the step (rllm.algorithms.logprobs).
        lp, ent = chunked_token_logprobs(
            base.get_output_embeddings(),
            hidden_N,
            t["input_ids"][:, 1:][mask],
            temperature=self.cfg.rollout.temperature or 1.0,
            chunk_tokens=self.cfg.backend.logprob_chunk_tokens,
            with_entropy=with_entropy,
            autocast=self._autocast,
        )
        index = mask.nonzero(as_tuple=True)
        logprobs_BT = torch.zeros(mask.shape, dtype=lp.dtype, device=lp.device).index_put(index, lp)
        entropy_BT = None
        if ent is not None:
            entropy_BT = torch.zeros(mask.shape, dtype=ent.dtype, device=ent.device).index_put(index, ent)
        return logprobs_BT, entropy_BT

    def _pick_attention(self, base: torch.nn.Module, length: int) -> None:
        """``backend.attn_implementation=auto`` on CPU: eager attention for rows of up to ``LONG_ROW_TOKENS``
        tokens, where it is faster, SDPA for longer ones. Eager attention keeps a ``[heads x T x T]`` matrix
        per layer and row for the backward, which grows with the square of the row: on SmolLM2-135M at
        T = 500 it is 0.41 of the micro-batch's 1.0 GB (docs/results.md), and by the square about 3.7 GB per
        1,500-token row of the agent examples. The two compute the same attention (to float rounding)."""
        if self.cfg.backend.attn_implementation != "auto" or self.device.type != "cpu":
            return
        if not getattr(base, "_supports_sdpa", False):  # a model without SDPA keeps eager
            return
        want = "sdpa" if length > LONG_ROW_TOKENS else "eager"
        if base.config._attn_implementation != want:
            base.set_attn_implementation(want)

    def _shared_prefix_hidden(self, base: torch.nn.Module, t: dict[str, torch.Tensor]) -> torch.Tensor | None:
        """Hidden states predicting each loss-masked token, computing each distinct prompt only once.

        The G answers of a GRPO group share their prompt token for token. Row b's prefix is
        ``input_ids[b, :p_b]`` with ``p_b`` = (first trained position) - 1; distinct prefixes run once
        (left-padded, with grad), their KV cache is indexed out to every row, and only the suffixes
        ``input_ids[b, p_b:]`` run per row. Gradients flow back through the cache into the prefix pass,
        so the result equals the flat forward up to float rounding, at a fraction of the tokens.
        Returns None when nothing is shared (then the flat path is as cheap).
        """
        ids, attn, loss_mask = t["input_ids"], t["attention_mask"], t["loss_mask"]
        lengths = attn.sum(dim=1).tolist()
        first = loss_mask.argmax(dim=1).tolist()
        pre_len = [f - 1 for f in first]
        if min(pre_len) < 1:
            return None
        ids_list = ids.tolist()
        keys = [tuple(ids_list[b][: pre_len[b]]) for b in range(len(ids_list))]
        unique: dict[tuple[int, ...], int] = {}
        row_to_u = [unique.setdefault(k, len(unique)) for k in keys]
        if len(unique) == len(keys):
            return None
        dev = ids.device
        # dict order is insertion order, so row u of the padded prefixes is the prefix numbered u
        prefix_ids, prefix_mask, prefix_pos = left_pad(list(unique), self.pad_id, dev)
        decoder = base.get_decoder()
        cache = DynamicCache()
        decoder(
            input_ids=prefix_ids,
            attention_mask=prefix_mask,
            position_ids=prefix_pos,
            past_key_values=cache,
            use_cache=True,
        )
        rows = torch.tensor(row_to_u, device=dev)
        cache.batch_select_indices(rows)
        S = max(n - p for n, p in zip(lengths, pre_len))
        suffix_ids = torch.full((len(keys), S), self.pad_id, dtype=torch.long, device=dev)
        suffix_mask = torch.zeros((len(keys), S), dtype=torch.long, device=dev)
        for b, (n, p) in enumerate(zip(lengths, pre_len)):
            suffix_ids[b, : n - p] = ids[b, p:n]
            suffix_mask[b, : n - p] = 1
        start = torch.tensor(pre_len, device=dev).unsqueeze(1)
        hidden = decoder(
            input_ids=suffix_ids,
            attention_mask=torch.cat([prefix_mask[rows], suffix_mask], dim=1),
            position_ids=start + torch.arange(S, device=dev).unsqueeze(0),
            past_key_values=cache,
            use_cache=True,
        ).last_hidden_state
        # Token a (a >= first_b) is predicted by the hidden state at absolute position a - 1,
        # i.e. suffix position a - 1 - p_b; mask column c = a - 1.
        b_idx, c_idx = loss_mask[:, 1:].bool().nonzero(as_tuple=True)
        return hidden[b_idx, c_idx - start.squeeze(1)[b_idx]]

    # ------------------------------------------------------------------ primitives
    @torch.no_grad()
    def compute_logprobs(self, batch: TrainBatch, *, reference: bool = False) -> list[list[float]]:
        if self.roles is None or reference:  # the reference is the base, whichever adapter is active
            return self._logprobs(batch, reference=reference)
        return self.roles.logprobs(batch, lambda part: self._logprobs(part, reference=False))

    def _logprobs(self, batch: TrainBatch, *, reference: bool) -> list[list[float]]:
        out: dict[int, list[float]] = {}
        index = {id(s): i for i, s in enumerate(batch.sequences)}
        was_training = self.model.training
        self.model.eval()
        try:
            for mb in self._micro_batches(batch):
                t = self._pad(mb)
                with self._reference_context(reference) as model:
                    lp, _ = self._response_logprobs(model, t)
                for row, s in enumerate(mb):
                    out[index[id(s)]] = [0.0] + lp[row, : len(s.input_ids) - 1].tolist()
        finally:
            self.model.train(was_training)
        return [out[i] for i in range(len(batch.sequences))]

    @contextlib.contextmanager
    def _reference_context(self, reference: bool):
        if not reference:
            yield self.model
        elif self.lora:
            with self.model.disable_adapter():
                yield self.model
        else:
            if self._reference is None:
                raise UnsupportedConfigError("reference logprobs need algorithm.loss.kl_coef > 0")
            yield self._reference

    def forward_backward(
        self,
        batch: TrainBatch,
        loss: LossConfig,
        *,
        old_logprobs: list[list[float]] | None = None,
        ref_logprobs: list[list[float]] | None = None,
        logprobs_out: list[list[float]] | None = None,
    ) -> dict[str, float]:
        """See :meth:`TrainingBackend.forward_backward`. ``logprobs_out``, when given (an empty list), is
        filled with each sequence's per-token logprobs from this same forward pass, aligned with its
        ``input_ids`` exactly as :meth:`compute_logprobs` returns them: a caller that reports the logprobs
        it trained on (the Tinker service) needs no second forward."""
        if not batch.sequences:
            raise ValueError("forward_backward got an empty batch; skip the step instead")
        sink: dict[int, list[float]] | None = {} if logprobs_out is not None else None
        if self.roles is None:
            sums, weight_total, total_loss = self._accumulate_gradients(
                batch, loss, old_logprobs=old_logprobs, ref_logprobs=ref_logprobs, logprobs_sink=sink
            )
            out: dict[str, float] = {}
        else:
            sums, weight_total, total_loss, out = self.roles.accumulate_gradients(
                batch, self._accumulate_gradients, loss, old_logprobs, ref_logprobs, sink
            )
        if logprobs_out is not None and sink is not None:
            logprobs_out[:] = [sink[id(s)] for s in batch.sequences]
        out.update({f"train/{k}": v / max(weight_total, 1.0) for k, v in sums.items()})
        out["train/loss"] = total_loss
        return out

    def _accumulate_gradients(
        self,
        batch: TrainBatch,
        loss: LossConfig,
        *,
        old_logprobs: list[list[float]] | None = None,
        ref_logprobs: list[list[float]] | None = None,
        logprobs_sink: dict[int, list[float]] | None = None,
    ) -> tuple[dict[str, float], float, float]:
        """Backward over every micro-batch of ``batch``; returns the un-normalised metric sums (each
        micro-batch's means times its trained tokens), the trained-token total and the summed loss, so
        that a caller holding part of a batch (a distributed rank) can combine them with the others'."""
        num_tokens, num_seqs = batch.loss_norms()
        index = {id(s): i for i, s in enumerate(batch.sequences)}
        sums: dict[str, float] = {}
        weight_total = 0.0
        total_loss = 0.0
        for mb in self._micro_batches(batch):
            old = [old_logprobs[index[id(s)]] for s in mb] if old_logprobs is not None else None
            ref = [ref_logprobs[index[id(s)]] for s in mb] if ref_logprobs is not None else None
            mb_loss, metrics, n_tok = self._micro_batch_backward(
                mb, loss, num_tokens, num_seqs, old, ref, logprobs_sink=logprobs_sink
            )
            total_loss += mb_loss
            # Token-weighted average of per-micro-batch metric means.
            for k, v in metrics.items():
                sums[k] = sums.get(k, 0.0) + v * n_tok
            weight_total += n_tok
        return sums, weight_total, total_loss

    def _micro_batch_backward(
        self,
        mb: list[TrainSequence],
        loss: LossConfig,
        num_tokens: float,
        num_seqs: float,
        old_rows: list[list[float]] | None,
        ref_rows: list[list[float]] | None,
        *,
        weight: float = 1.0,
        logprobs_sink: dict[int, list[float]] | None = None,
    ) -> tuple[float, dict[str, float], float]:
        """Forward and backward of one micro-batch (its loss normalised by the batch's counts, times
        ``weight``: 0 runs the collectives of a sharded model without changing any gradient); returns the
        loss, the metric means and the number of trained tokens. ``logprobs_sink`` collects each row's
        logprobs (aligned with its input_ids, keyed by ``id(sequence)``)."""
        t = self._pad(mb)
        mask = t["loss_mask"][:, 1:]
        adv = t["advantages"][:, 1:]
        rollout_lp = t["rollout_logprobs"][:, 1:]
        old = self._aligned(old_rows, mb)
        ref = self._aligned(ref_rows, mb)
        logprobs, entropy = self._response_logprobs(self.model, t, with_entropy=True)
        loss_BT, metrics = compute_policy_loss(
            logprobs,
            old if old is not None else rollout_lp,
            adv,
            mask,
            loss,
            rollout_logprobs=rollout_lp if loss.tis_cap is not None else None,
            ref_logprobs=ref,
        )
        mb_loss = aggregate_loss(
            loss_BT,
            mask,
            loss.agg,
            num_tokens=num_tokens,
            num_sequences=num_seqs,
            norm_tokens=loss.agg_norm_tokens,
        )
        (mb_loss * weight if weight != 1.0 else mb_loss).backward()
        if logprobs_sink is not None:
            rows = logprobs.detach().tolist()
            for row, s in enumerate(mb):
                logprobs_sink[id(s)] = [0.0] + rows[row][: len(s.input_ids) - 1]
        with torch.no_grad():
            n_tok = float(mask.sum())
            metrics["entropy"] = (entropy * mask).sum() / mask.sum().clamp(min=1)
            metrics["trainer_rollout_logprob_diff"] = (
                (logprobs.detach() - rollout_lp).abs() * mask
            ).sum() / mask.sum().clamp(min=1)
        return float(mb_loss.detach()) * weight, {k: float(v) for k, v in metrics.items()}, n_tok * weight

    def _aligned(self, rows: list[list[float]] | None, mb: list[TrainSequence]) -> torch.Tensor | None:
        """Per-sequence values (aligned with input_ids) as a padded tensor aligned with input_ids[:, 1:]."""
        if rows is None:
            return None
        T = max(len(s.input_ids) for s in mb)
        padded = [row + [0.0] * (T - len(s.input_ids)) for row, s in zip(rows, mb)]
        return torch.tensor(padded, dtype=torch.float32, device=self.device)[:, 1:]

    def set_optimizer(
        self,
        *,
        lr: float,
        betas: tuple[float, float],
        eps: float,
        weight_decay: float,
        grad_clip: float | None,
    ) -> None:
        for group in self.optimizer.param_groups:
            group.update(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        # The schedule becomes constant at this rate: LambdaLR multiplies its base rate by the factor.
        self.scheduler.base_lrs = [lr for _ in self.optimizer.param_groups]
        self.scheduler.lr_lambdas = [lambda _step: 1.0 for _ in self.optimizer.param_groups]
        self.cfg.optim.grad_clip = grad_clip

    def load_adapter_weights(self, path: Path) -> None:
        if not self.lora:
            raise UnsupportedConfigError("load_adapter_weights needs a LoRA run (lora.enabled=true)")
        from peft import set_peft_model_state_dict  # peft is loaded already: this is a LoRA run
        from safetensors.torch import load_file

        set_peft_model_state_dict(
            self.model, load_file(str(Path(path) / "adapter" / "adapter_model.safetensors"))
        )

    def optim_step(self) -> dict[str, float]:
        if self.roles is not None:
            lr = self.cfg.optim.lr * self._lr_factor(self.step)
            self.step += 1
            return {**self.roles.optim_step(), "train/lr": lr}
        params = [p for p in self.model.parameters() if p.requires_grad]
        grad_norm = self._clip_gradients(params)
        lr = self.optimizer.param_groups[0]["lr"]
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        return {"train/grad_norm": float(grad_norm), "train/lr": lr}

    def _clip_gradients(self, params: list[torch.nn.Parameter]) -> torch.Tensor:
        """Scale gradients to a global norm of at most optim.grad_clip; return the norm before."""
        clip = self.cfg.optim.grad_clip
        return torch.nn.utils.clip_grad_norm_(params, clip if clip is not None else float("inf"))

    def skip_step(self) -> None:
        self.step += 1
        with warnings.catch_warnings():
            # torch warns when the schedule moves without an optimizer step; here that is the point.
            warnings.simplefilter("ignore", UserWarning)
            if self.roles is not None:
                self.roles.skip_step()
            else:
                self.scheduler.step()

    # ------------------------------------------------------------------ weights
    def _lora_layers(self) -> dict[str, Any]:
        """Adapted linear layers (peft's LoRA layers) by their plain Hugging Face module name."""
        from peft.tuners.lora import LoraLayer

        return {
            name: module
            for name, module in self.model.base_model.model.named_modules()
            if isinstance(module, LoraLayer)
        }

    def _lora_weights(self) -> dict[str, Any]:
        """The same layers by the plain Hugging Face name of their weight (``<module>.weight``)."""
        return {f"{name}.weight": module for name, module in self._lora_layers().items()}

    @torch.no_grad()
    def named_merged_weights(
        self, *, changed_only: bool = False, writers: bool = False
    ) -> Iterator[tuple[str, torch.Tensor | MergeWriter]]:
        """The policy's weights under plain Hugging Face names, LoRA deltas merged in (in the base's dtype:
        the engine holds that dtype, or a lower one, anyway).

        With ``changed_only`` and LoRA, only the adapted weights are returned (the rest are frozen). Yielded
        one at a time and merged as each is taken, so an engine copying them in holds one merged weight at a
        time, not a second copy of every adapted one (a 2 x 4 x 32 step's sync: 0.18 -> 0.11 s). With
        ``writers`` an adapted weight comes as a :class:`MergeWriter`, which the engine has merge straight
        into its own tensor (no merged copy at all).
        """
        if not self.lora:
            yield from ((n, p.detach()) for n, p in self.model.named_parameters())
            return
        layers = self._lora_weights()
        for name, p in self.model.base_model.model.named_parameters():
            if "lora_" in name:
                continue
            plain = name.replace(".base_layer.", ".")
            module = layers.get(plain)
            if module is not None:
                writer = MergeWriter(p.detach(), layer_factors(module), fan_in_fan_out=module.fan_in_fan_out)
                yield plain, writer if writers else writer.merged()
            elif not changed_only:
                yield plain, p.detach()

    def weights_for_engine(
        self, *, changed_only: bool = False
    ) -> Iterator[tuple[str, torch.Tensor | MergeWriter]]:
        return self.named_merged_weights(changed_only=changed_only, writers=True)

    def save_adapter(self, path: Path, adapter: str | None = None) -> None:
        if not self.lora:
            raise UnsupportedConfigError("save_adapter needs a LoRA run (lora.enabled=true)")
        if self.roles is not None:
            self.roles.save_adapter(Path(path), adapter or DEFAULT_ADAPTER)
        elif adapter not in (None, DEFAULT_ADAPTER):
            raise ValueError(f"no adapter {adapter!r}: this run has no roles, so one adapter (default)")
        else:
            self.model.save_pretrained(Path(path))

    @property
    def adapter_names(self) -> list[str]:
        return list(self.roles.names) if self.roles is not None else []

    def named_adapter_tensors(
        self, *, changed_only: bool = False
    ) -> dict[str, dict[str, tuple[torch.Tensor, torch.Tensor]]]:
        if self.roles is None:
            raise UnsupportedConfigError("named_adapter_tensors needs roles (one adapter per role)")
        return self.roles.tensors(changed_only=changed_only)

    def export_model(self, path: Path) -> None:
        """Without roles: ``path`` is the model (LoRA merged). With roles: ``path/<adapter>/`` per adapter."""
        path = Path(path)
        if self.roles is not None:
            self.roles.export(path, self.model_path)
        elif self.lora:
            # Merge into a fresh float32 copy of the original weights (the training copy of the frozen base
            # may be bf16, and peft's merge_and_unload would destroy the adapters we keep training).
            merged = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=torch.float32)
            params = dict(merged.named_parameters())
            layers = self._lora_weights()
            missing = sorted(set(layers) - set(params))
            if missing:
                raise RuntimeError(f"merged LoRA export does not match the model: no weights {missing}")
            with torch.no_grad():
                for name, module in layers.items():
                    factors = [(A.cpu(), B.cpu(), s) for A, B, s in layer_factors(module)]
                    merge_lora(params[name], factors, fan_in_fan_out=module.fan_in_fan_out, inplace=True)
            merged.save_pretrained(path)
        else:
            self.model.save_pretrained(path)

    # ------------------------------------------------------------------ state
    def save_state(self, path: Path) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        if self.roles is not None:  # adapters/<name>/, and every adapter's optimizer and schedule
            optim_state = self.roles.save_state(path)
        else:
            self.model.save_pretrained(path / ("adapter" if self.lora else "model"))
            optim_state = {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()}
        torch.save(
            {
                **optim_state,
                "step": self.step,
                "rng": {
                    "torch": torch.get_rng_state(),
                    "numpy": np.random.get_state(),
                    "python": random.getstate(),
                },
            },
            path / "trainer_state.pt",
        )

    def load_state(self, path: Path) -> None:
        path = Path(path)
        state = torch.load(path / "trainer_state.pt", weights_only=False)
        if self.roles is not None:
            self.roles.load_state(path, state)
        elif "adapters" in state:
            raise UnsupportedConfigError(
                f"checkpoint {path} holds one adapter per role ({', '.join(state['adapters'])}) but this run "
                "has no roles: resume with the roles it was saved with"
            )
        elif self.lora:
            from peft import set_peft_model_state_dict
            from safetensors.torch import load_file

            set_peft_model_state_dict(
                self.model, load_file(str(path / "adapter" / "adapter_model.safetensors"))
            )
        else:
            from safetensors.torch import load_file

            weights = load_file(str(path / "model" / "model.safetensors"))
            missing, unexpected = self.model.load_state_dict(weights, strict=False)
            real_missing = [
                m for m in missing if not (m == "lm_head.weight" and self.model.config.tie_word_embeddings)
            ]
            if real_missing or unexpected:
                raise RuntimeError(
                    f"checkpoint does not match model: missing={real_missing} unexpected={unexpected}"
                )
        if self.roles is None:
            self.optimizer.load_state_dict(state["optimizer"])
            self.scheduler.load_state_dict(state["scheduler"])
        self.step = state["step"]
        torch.set_rng_state(state["rng"]["torch"])
        np.random.set_state(state["rng"]["numpy"])
        random.setstate(state["rng"]["python"])
        self._synced_once = False
