"""``SFTTrainer``: supervised fine-tuning over the same training backends as RL (``rllm sft``).

Per step, top to bottom (``train_step``): take the step's ``sft.batch_size`` rows (a seeded shuffle per
epoch, so the order is a function of the step and a resumed run sees the same batches), forward/backward
with the ``cross_entropy`` policy loss (the per-token weight, 1 on assistant tokens, rides in
``TrainSequence.advantages``), optimizer step, log; then ``_run`` measures the held-out loss and checkpoints.

The loss of a step is ``-sum(logp_t) / N`` over the assistant tokens t of every row of the optimizer batch,
``N`` their count (``algorithm.loss.agg=token-mean`` normalised over the whole batch, however the backend
splits it into micro-batches or ranks): every trained token counts the same, as in TRL's SFTTrainer.
"""

from __future__ import annotations

import logging
import math
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import AutoTokenizer

from rllm.algorithms.losses import LossConfig
from rllm.inference.chat_template import ChatRenderer
from rllm.models import resolve_model
from rllm.store import RunWriter, default_store_path
from rllm.trainer.backends import backend_capabilities, build_backend
from rllm.trainer.backends.base import UnsupportedConfigError
from rllm.trainer.checkpoint import drop_metrics_after, latest_checkpoint, load_loop_state, save_checkpoint
from rllm.trainer.checks import check_backend_config
from rllm.trainer.config import tracker_options
from rllm.trainer.sft_config import SFTConfig
from rllm.trainer.sft_data import (
    Conversation,
    SFTDataError,
    SFTRow,
    load_conversations,
    render_rows,
    split_held_out,
)
from rllm.types import TrainBatch, TrainSequence
from rllm.utils.config import dump_config
from rllm.utils.metrics import MetricsLogger, build_sinks, plot_metrics

logger = logging.getLogger(__name__)

__all__ = ["SFTResult", "SFTTrainer"]

_CROSS_ENTROPY = LossConfig(name="cross_entropy")
ADAPTER_DIR = "adapter"  # a LoRA run's final_model/adapter/: the PEFT adapter alone, beside the merged model

CONSOLE_KEYS = {
    "train/loss": "loss",
    "eval/loss": "eval_loss",
    "train/grad_norm": "grad_norm",
    "train/lr": "lr",
    "epoch": "epoch",
    "time/step_s": "step_s",
}


@dataclass
class SFTResult:
    """What a finished SFT run reports: the losses and where things were written."""

    run_dir: Path
    steps: int
    final_train_loss: float | None = None
    initial_eval_loss: float | None = None
    final_eval_loss: float | None = None
    eval_history: list[dict[str, float]] = field(default_factory=list)
    final_model_dir: Path | None = None


def _sequence(row: SFTRow) -> TrainSequence:
    weights = [float(m) for m in row.loss_mask]
    return TrainSequence(
        input_ids=row.input_ids,
        loss_mask=row.loss_mask,
        rollout_logprobs=[0.0] * len(row.input_ids),
        advantages=weights,
    )


class SFTTrainer:
    """Fine-tunes ``model.path`` on the assistant turns of ``data.train_file`` (or of ``train`` given here).

    Construction checks the config against the backend and renders the data (errors surface here, before a
    model loads); :meth:`train` runs, checkpoints and writes ``final_model/`` (with LoRA, its
    ``adapter/`` too).
    """

    def __init__(
        self,
        config: SFTConfig,
        *,
        train: list[Conversation] | None = None,
        test: list[Conversation] | None = None,
    ) -> None:
        self.cfg = cfg = config
        capabilities = backend_capabilities(cfg.backend.name)
        if capabilities.losses is not None and "cross_entropy" not in capabilities.losses:
            raise UnsupportedConfigError(
                f"backend '{capabilities.name}' cannot run the cross_entropy loss SFT trains with: use "
                "backend.name=local or distributed"
            )
        check_backend_config(cfg.backend_config(1), capabilities)
        if train is None:
            if cfg.data.train_file is None:
                raise SFTDataError("no training data: set data.train_file (docs/sft.md for the formats)")
            train = load_conversations(cfg.data.train_file, cfg.data.format)
        if test is None:
            if cfg.data.test_file is not None:
                test = load_conversations(cfg.data.test_file, cfg.data.format)
            else:
                train, test = split_held_out(train, cfg.data.test_fraction, cfg.trainer.seed)
        self.model_path = resolve_model(cfg.model.path) if capabilities.loads_model else cfg.model.path
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        eos = self.tokenizer.eos_token_id
        if eos is None:
            raise SFTDataError(f"the tokenizer of {cfg.model.path} has no eos token to end an assistant turn")
        renderer = ChatRenderer(self.tokenizer)
        s = cfg.sft
        self.train_rows, self.train_stats = render_rows(
            renderer, train, eos_id=eos, max_length=s.max_length, overlong=s.overlong
        )
        self.test_rows = (
            render_rows(
                renderer, test, eos_id=eos, max_length=s.max_length, overlong=s.overlong, what="held-out"
            )[0]
            if test
            else []
        )
        self.steps_per_epoch = math.ceil(len(self.train_rows) / s.batch_size)
        self.steps = cfg.trainer.steps or s.epochs * self.steps_per_epoch
        self.run_dir = Path(cfg.trainer.run_dir) / cfg.trainer.name
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else eos
        self.backend: Any = None
        self.run_store: RunWriter | None = None

    # ------------------------------------------------------------------ data order
    def _epoch_order(self, epoch: int) -> list[int]:
        order = list(range(len(self.train_rows)))
        if not self.cfg.sft.shuffle:
            return order
        random.Random(self.cfg.trainer.seed * 1_000_003 + epoch).shuffle(order)
        return order

    def batch_for_step(self, step: int) -> TrainBatch:
        """The rows of optimizer step ``step`` (0-based): a function of the step alone, so a resumed run
        trains on exactly the batches the uninterrupted one would. An epoch's last batch may be smaller."""
        epoch, k = divmod(step, self.steps_per_epoch)
        order = self._epoch_order(epoch)
        b = self.cfg.sft.batch_size
        return TrainBatch(sequences=[_sequence(self.train_rows[i]) for i in order[k * b : (k + 1) * b]])

    # ------------------------------------------------------------------ steps
    def train_step(self, step: int) -> dict[str, float]:
        """One optimizer step over ``batch_for_step(step)``; returns its metrics."""
        started = time.perf_counter()
        batch = self.batch_for_step(step)
        metrics = self.backend.forward_backward(batch, _CROSS_ENTROPY)
        metrics.update(self.backend.optim_step())
        return {
            "train/loss": metrics["train/loss"],
            "train/grad_norm": metrics["train/grad_norm"],
            "train/lr": metrics["train/lr"],
            "train/sequences": float(len(batch)),
            "train/tokens": float(batch.num_response_tokens),
            "epoch": (step + 1) / self.steps_per_epoch,
            "time/step_s": time.perf_counter() - started,
            **self.backend.step_metrics(),  # the distributed ranks' time in collectives
        }

    def evaluate(self) -> dict[str, float]:
        """Held-out loss: ``-sum(logp_t) / N`` over every assistant token of the held-out rows, and its exp."""
        total, count = 0.0, 0
        b = self.cfg.sft.batch_size
        for i in range(0, len(self.test_rows), b):
            batch = TrainBatch(sequences=[_sequence(r) for r in self.test_rows[i : i + b]])
            for seq, lp in zip(batch.sequences, self.backend.compute_logprobs(batch)):
                total -= sum(v for v, m in zip(lp, seq.loss_mask) if m)
                count += seq.num_response_tokens
        loss = total / max(count, 1)
        return {"eval/loss": loss, "eval/perplexity": math.exp(min(loss, 50.0)), "eval/tokens": float(count)}

    # ------------------------------------------------------------------ the run
    def train(self) -> SFTResult:
        """Run (or resume, with ``trainer.resume``) to ``self.steps`` steps; write ``final_model/`` (and, with
        LoRA, ``final_model/adapter/``)."""
        cfg = self.cfg
        self.run_dir.mkdir(parents=True, exist_ok=True)
        ckpt = latest_checkpoint(self.run_dir)
        if ckpt is not None and not cfg.trainer.resume:
            raise UnsupportedConfigError(
                f"run directory {self.run_dir} already has checkpoints: pass trainer.resume=true to continue it, "
                "or a new trainer.name"
            )
        resume_from = ckpt if cfg.trainer.resume else None
        self.run_store = self._open_run_store(resume_from)
        try:
            result = self._run(resume_from)
        except BaseException as exc:
            if self.run_store is not None:
                self.run_store.fail(exc)
            raise
        finally:
            if self.backend is not None:
                self.backend.close()
        if self.run_store is not None:
            self.run_store.finish(
                {k: str(v) if isinstance(v, Path) else v for k, v in asdict(result).items()}
            )
        return result

    def _open_run_store(self, resume_from: Path | None) -> RunWriter | None:
        t = self.cfg.trainer
        if not t.store_enabled:
            return None
        return RunWriter.start(
            t.store or default_store_path(t.run_dir),
            kind="sft",
            name=t.name,
            config=self.cfg.model_dump(),
            model=self.cfg.model.path,
            task=self.cfg.data.train_file,
            location=self.run_dir,
            resume_from_step=(load_loop_state(resume_from)["step"] if resume_from else 0)
            if t.resume
            else None,
            episodes_per_step=0,
        )

    def _setup(self) -> None:
        cfg = self.cfg
        if cfg.trainer.threads:
            torch.set_num_threads(cfg.trainer.threads)
        random.seed(cfg.trainer.seed)
        np.random.seed(cfg.trainer.seed)
        self.backend = build_backend(cfg.backend_config(self.steps), self.model_path, pad_id=self.pad_id)

    def _evaluates_at(self, done: int) -> bool:
        ev = self.cfg.eval
        if not self.test_rows:
            return False
        if done == self.steps:
            return ev.after
        return bool(ev.every_steps) and done % ev.every_steps == 0

    def _run(self, resume_from: Path | None) -> SFTResult:
        cfg = self.cfg
        dump_config(cfg, self.run_dir / "config.yaml")
        drop_metrics_after(
            self.run_dir / "metrics.jsonl", load_loop_state(resume_from)["step"] if resume_from else -1
        )
        self._setup()
        sinks = build_sinks(
            cfg.trainer.loggers,
            self.run_dir,
            cfg.trainer.name,
            cfg.model_dump(),
            console_keys=CONSOLE_KEYS,
            **tracker_options(cfg.trainer),
        )
        if self.run_store is not None:
            sinks.append(self.run_store)
        result = SFTResult(run_dir=self.run_dir, steps=self.steps)
        start, history = 0, []
        logger.info(
            "sft: %d training rows (%d assistant tokens), %d held-out rows, %d steps of %d rows",
            len(self.train_rows),
            self.train_stats.assistant_tokens,
            len(self.test_rows),
            self.steps,
            cfg.sft.batch_size,
        )
        with MetricsLogger(sinks) as metrics_logger:
            if resume_from is not None:
                self.backend.load_state(resume_from)
                state = load_loop_state(resume_from)
                start, history = state["step"], state["eval_history"]
                logger.info("resumed from %s at step %d", resume_from, start)
            elif cfg.eval.before and self.test_rows:
                ev = self.evaluate()
                history.append({"step": 0, **ev})
                metrics_logger.log(0, ev)
            for step in range(start, self.steps):
                metrics = self.train_step(step)
                result.final_train_loss = metrics["train/loss"]
                done = step + 1
                if self._evaluates_at(done):
                    ev = self.evaluate()
                    history.append({"step": done, **ev})
                    metrics.update(ev)
                metrics_logger.log(done, metrics)
                every = cfg.trainer.checkpoint_every
                if (every and done % every == 0) or done == self.steps:
                    state = {"step": done, "eval_history": history}
                    save_checkpoint(
                        self.run_dir, done, self.backend, state, keep=cfg.trainer.keep_checkpoints
                    )
            result.final_model_dir = self.run_dir / "final_model"
            started = time.perf_counter()
            self.backend.export_model(result.final_model_dir)
            self.tokenizer.save_pretrained(result.final_model_dir)
            if self.backend.lora:  # the adapter alone, too: what roles.<role>.init_adapter starts a role from
                self.backend.save_adapter(result.final_model_dir / ADAPTER_DIR)
            logger.info(
                "final model written to %s in %.1fs", result.final_model_dir, time.perf_counter() - started
            )
            # W&B / MLflow keep the model with the run (rllm.utils.trackers); the other sinks are not called.
            metrics_logger.log_final_model(result.final_model_dir, self.run_dir / "config.yaml")
        losses = {h["step"]: h["eval/loss"] for h in history}
        result.eval_history = history
        result.initial_eval_loss = losses.get(0)
        result.final_eval_loss = losses.get(self.steps)
        if cfg.trainer.plot and "jsonl" in cfg.trainer.loggers:
            try:
                plot_metrics(
                    self.run_dir / "metrics.jsonl",
                    self.run_dir / "metrics.png",
                    ["train/loss", "eval/loss", "train/grad_norm", "train/lr"],
                )
            except ImportError:
                logger.info("matplotlib not installed; skipping metrics.png")
        return result
