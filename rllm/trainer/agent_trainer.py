"""``AgentTrainer``: the RL loop, written once above the backend API.

Per step, top to bottom: take the next tasks, run episodes (sample + score), group them, compute
advantages, filter, build the token batch, forward/backward, optimizer step, sync weights to the
inference engine, log, checkpoint. Backends hide *how* a step runs, never *what* the loop does.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rllm.algorithms.advantages import takes_std
from rllm.algorithms.transforms import (
    FilterConfig,
    attach_trainer_logprobs,
    build_train_batch,
    compute_advantages,
    filter_groups,
    group_episodes,
    state_signal,
    step_returns,
)
from rllm.data.registry import DatasetRegistry
from rllm.engine.workflow_engine import Workflow, WorkflowEngine
from rllm.gateway.app import create_app
from rllm.gateway.server import GatewayServer
from rllm.gateway.traces import TraceStore
from rllm.gateway.upstreams import LocalUpstream
from rllm.inference.base import SamplingParams
from rllm.models import resolve_model
from rllm.rewards.shaping import Shaper, apply_shaping, format_bonus, overlong_penalty
from rllm.sdk.decorators import Rollout
from rllm.sdk.workflow import GatewayWorkflow
from rllm.store import RunWriter, default_store_path
from rllm.trainer.backends import backend_capabilities, build_backend
from rllm.trainer.backends.base import UnsupportedConfigError, WeightSyncError
from rllm.trainer.checkpoint import latest_checkpoint, load_loop_state, save_checkpoint
from rllm.trainer.checks import check_config
from rllm.trainer.config import TrainConfig
from rllm.trainer.engines import build_engine
from rllm.types import Episode
from rllm.utils.config import dump_config
from rllm.utils.metrics import MetricsLogger, build_sinks, plot_metrics, summarize
from rllm.workflows.builtin import build_workflow

logger = logging.getLogger(__name__)

# metric -> console column label
CONSOLE_KEYS = {
    "reward/mean": "reward",
    "accuracy": "acc",
    "response_len/mean": "resp_len",
    "train/entropy": "entropy",
    "train/clip_fraction": "clip_frac",
    "train/approx_kl": "kl",
    "train/grad_norm": "grad_norm",
    "time/step_s": "step_s",
    "time/eta_s": "eta_s",
    "eval/accuracy": "eval_acc",
}


@dataclass
class TrainResult:
    """What a finished run reports: held-out greedy accuracy before/after and where things were written."""

    run_dir: Path
    steps: int
    eval_history: list[dict[str, float]] = field(default_factory=list)
    initial_accuracy: float | None = None
    final_accuracy: float | None = None
    final_model_dir: Path | None = None


class AgentTrainer:
    """Trains the policy behind ``workflow`` on ``train_tasks``; evaluates greedily on ``test_tasks``.

    With no workflow/tasks it trains the built-in single-turn task named by ``config.data.task``.
    """

    def __init__(
        self,
        config: TrainConfig,
        *,
        workflow: Workflow | Any | None = None,
        evaluator: Any | None = None,
        train_tasks: list[dict[str, Any]] | None = None,
        test_tasks: list[dict[str, Any]] | None = None,
        reward_shaping: list[Shaper] | None = None,
    ) -> None:
        self.cfg = config
        check_config(config, backend_capabilities(config.backend.name))
        # An @rllm.rollout flow talks to the model over HTTP: the trainer serves its engine behind an
        # embedded gateway and runs the flow through a GatewayWorkflow (one session per episode).
        self.agent_flow = workflow if isinstance(workflow, Rollout) else None
        if evaluator is not None and self.agent_flow is None:
            raise TypeError("evaluator= goes with an @rllm.rollout flow; a workflow scores its own episodes")
        self.evaluator = evaluator
        self.gateway: Any = None
        if workflow is not None and config.workflow.name != "single_turn":
            raise UnsupportedConfigError(
                f"workflow.name={config.workflow.name} names a built-in workflow, but a workflow was passed to "
                "AgentTrainer too: drop one of them"
            )
        self.workflow = workflow or build_workflow(config)
        self.shapers = shapers_from_config(config) + list(reward_shaping or [])
        d, seed = config.data, config.trainer.seed
        if train_tasks is None or test_tasks is None:
            datasets = DatasetRegistry()
            if train_tasks is None:
                train_tasks = datasets.load(
                    d.task, d.train_split, limit=d.train_size, seed=seed, reward=d.reward
                )
            if test_tasks is None:
                test_tasks = datasets.load(
                    d.task, d.test_split, limit=d.test_size, seed=seed, reward=d.reward
                )
        self.train_tasks, self.test_tasks = train_tasks, test_tasks
        if not self.train_tasks:
            raise ValueError("no training tasks: pass train_tasks or set data.train_size > 0")
        self.run_dir = Path(config.trainer.run_dir) / config.trainer.name
        self.run_store: RunWriter | None = None  # opened by train()
        self._order: list[int] = []
        self._order_epoch = -1
        # Resolved here, after the cheap checks, so a wrong model path fails at start-up (pulling a
        # built-in model on first use) rather than after the run has begun loading things.
        self.model_path = resolve_model(config.model.path)

    # ------------------------------------------------------------------ setup
    def _setup(self) -> None:
        cfg = self.cfg
        if cfg.trainer.threads:
            torch.set_num_threads(cfg.trainer.threads)
        random.seed(cfg.trainer.seed)
        np.random.seed(cfg.trainer.seed)
        # Both come from factories keyed by config (backend.name, inference.engine); the loop below is the
        # same for every pair. Closed in train()'s finally, so a failed start leaves nothing running.
        self.engine = build_engine(cfg, self.model_path, run_dir=self.run_dir)
        self.backend = build_backend(cfg, self.model_path, pad_id=self.engine.pad_id)
        if self.backend.lora and getattr(self.engine, "sync_from", None) is not None:
            # Servers in other processes start from the base weights; a LoRA run's requests name its adapter, so
            # the version-0 adapter is loaded now: a server that cannot take it fails here, before any rollout.
            self._sync_weights("start-up")
        r = cfg.rollout
        self.train_sampling = SamplingParams(
            temperature=r.temperature,
            top_p=r.top_p,
            top_k=r.top_k,
            max_tokens=r.max_tokens,
            seed=cfg.trainer.seed,
        )
        self.eval_sampling = SamplingParams(temperature=0.0, max_tokens=cfg.eval.max_tokens)
        workflow = self.workflow
        if self.agent_flow is not None:
            workflow = self._start_gateway()
        self.rollouts = WorkflowEngine(
            workflow,
            self.engine,
            self.train_sampling,
            max_concurrency=r.max_concurrency,
            timeout_s=r.timeout_s,
            retries=r.retries,
        )
        self.filters = FilterConfig(**cfg.algorithm.filters.model_dump())

    def _start_gateway(self) -> Workflow:
        if getattr(self.engine, "gateway_urls", None):  # the engine's own gateway(s) (a vLLM pool)
            self.trace_store = self.engine.trace_store
            logger.info(
                "agent flow %s runs against the engine's gateway(s) at %s",
                self.agent_flow.name,
                ", ".join(self.engine.gateway_urls),
            )
            return GatewayWorkflow(
                self.agent_flow,
                self.evaluator,
                gateway_url=self.engine.gateway_urls,
                model=self.cfg.model.path,
                store=self.trace_store,
            )
        # HTTP calls of concurrent episodes arrive a few ms apart: let them meet in one batch.
        self.engine.batch_wait_s = self.cfg.rollout.gateway_batch_wait_ms / 1000.0
        self.trace_store = TraceStore(self.run_dir / "traces.db")
        app = create_app(LocalUpstream(self.engine), self.trace_store, model_name=self.cfg.model.path)
        self.gateway = GatewayServer(app).start()
        logger.info(
            "agent flow %s runs against the embedded gateway at %s (traces: %s)",
            self.agent_flow.name,
            self.gateway.url,
            self.trace_store.path,
        )
        return GatewayWorkflow(
            self.agent_flow,
            self.evaluator,
            gateway_url=self.gateway.url,
            model=self.cfg.model.path,
            store=self.trace_store,
        )

    def _stop_gateway(self) -> None:
        if self.gateway is not None:  # the embedded one; an engine's own gateway closes with the engine
            self.gateway.stop()
            self.trace_store.close()
            self.gateway = None

    def _close(self) -> None:
        """Stop what the run started: the embedded gateway, the engine's servers, the backend's workers."""
        self._stop_gateway()
        for part in ("engine", "backend"):
            close = getattr(getattr(self, part, None), "close", None)
            if close is not None:
                try:
                    close()
                except Exception:  # closing must not hide the error that ended the run
                    logger.exception("closing the %s failed", part)

    def _sync_weights(self, when: str) -> None:
        """Push the backend's weights into the engine; a failure aborts the run (the next rollouts would
        sample from stale weights) with what failed."""
        try:
            self.backend.sync_weights_to(self.engine)
        except WeightSyncError as exc:
            raise WeightSyncError(
                f"weight sync at {when} (version {self.backend.step}) failed, so training stops "
                f"rather than sample from stale weights: {exc}"
            ) from exc

    def _task_order(self, epoch: int) -> list[int]:
        """The shuffled task order of one pass over the data (cached: every step of the epoch reads it)."""
        if self._order_epoch != epoch:
            order = list(range(len(self.train_tasks)))
            random.Random(self.cfg.trainer.seed * 1_000_003 + epoch).shuffle(order)
            self._order, self._order_epoch = order, epoch
        return self._order

    def _tasks_for_step(self, step: int) -> list[dict[str, Any]]:
        """The step's tasks: a deterministic function of (seed, step), so a resumed run sees the same data."""
        n = self.cfg.rollout.batch_size
        out = []
        for k in range(step * n, (step + 1) * n):
            epoch, pos = divmod(k, len(self.train_tasks))
            out.append(self.train_tasks[self._task_order(epoch)[pos]])
        return out

    # ------------------------------------------------------------------ eval
    def evaluate(self, step: int) -> dict[str, float]:
        t0 = time.perf_counter()
        episodes = asyncio.run(
            self.rollouts.run_tasks(self.test_tasks, sampling=self.eval_sampling, description=f"eval@{step}")
        )
        correct = [bool(e.is_correct) for e in episodes]
        out = {
            "eval/accuracy": float(np.mean(correct)),
            "eval/reward": float(np.mean([e.reward or 0.0 for e in episodes])),
            "eval/n": float(len(episodes)),
            # A failed held-out episode (its flow or reward raised, or it timed out) counts as wrong above.
            "eval/failed": float(sum(e.failed for e in episodes)),
            "eval/response_len": float(
                np.mean(
                    [len(s.response_ids) for e in episodes for t in e.trajectories for s in t.steps] or [0]
                )
            ),
            "eval/time_s": time.perf_counter() - t0,
        }
        # What flows and evaluators report per episode (signal/*, tools/*, judge/*, ...), averaged over the
        # held-out set.
        for key in sorted({k for e in episodes for k in e.metrics if "/" in k}):
            out[f"eval/{key}"] = float(np.mean([e.metrics[key] for e in episodes if key in e.metrics]))
        logger.info(
            "eval at step %d: accuracy %.3f on %d held-out tasks", step, out["eval/accuracy"], len(episodes)
        )
        return out

    # ------------------------------------------------------------------ one step
    def train_step(self, step: int) -> dict[str, float]:
        cfg = self.cfg
        t0 = time.perf_counter()
        tasks = self._tasks_for_step(step)
        sampling = self.train_sampling.model_copy(
            update={"seed": cfg.trainer.seed * 7_919 + step * 1_000_003}
        )
        gen_before = self.engine.stats["generated_tokens"]
        episodes = asyncio.run(
            self.rollouts.run_tasks(
                tasks, group_size=cfg.rollout.group_size, sampling=sampling, description=f"step {step}"
            )
        )
        t_rollout = time.perf_counter() - t0
        check_staleness(episodes, self.backend.step, cfg.rollout.max_staleness)
        apply_shaping(episodes, self.shapers)
        metrics = episode_metrics(episodes)
        metrics["time/rollout_s"] = t_rollout
        metrics["perf/rollout_tokens_per_s"] = (self.engine.stats["generated_tokens"] - gen_before) / max(
            t_rollout, 1e-9
        )
        if hasattr(self.engine, "metrics"):  # a server pool: servers healthy, calls re-routed after a failure
            metrics.update(self.engine.metrics())

        groups = group_episodes(episodes)
        alg = cfg.algorithm
        signal = {
            "per_step": lambda g: step_returns(g, alg.gamma),
            "per_state": lambda g: state_signal(g, alg.gamma),
        }.get(alg.credit)
        groups, fmetrics = filter_groups(groups, self.filters, signal=signal)
        metrics.update(fmetrics)
        t1 = time.perf_counter()
        if groups:
            est_kwargs: dict[str, object] = {}
            if _uses(alg.advantage, "grpo"):
                est_kwargs["norm_std"] = alg.norm_std
            if any(takes_std(name) for name in _estimator_names(alg.advantage)):
                est_kwargs["std"] = alg.std
            metrics.update(
                compute_advantages(
                    groups,
                    alg.advantage,
                    credit=alg.credit,
                    gamma=alg.gamma,
                    step_weight=alg.step_weight,
                    **est_kwargs,
                )
            )
            batch = build_train_batch(groups, merge=alg.merge_turns)
            if cfg.algorithm.loss_norm == "sampled":  # skipped zero-variance rows still count in the mean
                batch.loss_norm_tokens = (
                    batch.num_response_tokens + fmetrics["filter/zero_variance_response_tokens"]
                )
                batch.loss_norm_sequences = len(batch.sequences) + fmetrics["filter/zero_variance_sequences"]
            metrics.update(batch.metrics)
        else:
            batch = None
        if batch is not None and batch.num_response_tokens > 0:
            old = self.backend.compute_logprobs(batch) if cfg.backend.old_logprobs == "recompute" else None
            if old is not None and self.run_store is not None:  # shown beside the rollout's in the token view
                attach_trainer_logprobs(groups, old, merge=alg.merge_turns)
            ref = (
                self.backend.compute_logprobs(batch, reference=True)
                if cfg.algorithm.loss.kl_coef > 0
                else None
            )
            metrics.update(
                self.backend.forward_backward(batch, cfg.algorithm.loss, old_logprobs=old, ref_logprobs=ref)
            )
            metrics.update(self.backend.optim_step())
            metrics["perf/train_tokens_per_s"] = batch.num_tokens / max(time.perf_counter() - t1, 1e-9)
        else:
            # No group carried signal: nothing to learn from, but the step (and data position) still advance.
            logger.info("step %d: every group was filtered out; skipping the update", step)
            self.backend.skip_step()
            metrics["train/skipped"] = 1.0
        metrics["time/train_s"] = time.perf_counter() - t1
        t2 = time.perf_counter()
        self._sync_weights(f"step {step + 1}")
        metrics["time/sync_s"] = time.perf_counter() - t2
        if self.run_store is not None:  # written with this step's metrics, in one transaction
            self.run_store.stage_episodes(step + 1, episodes, self.engine.tokenizer)
        metrics["time/step_s"] = time.perf_counter() - t0
        return metrics

    # ------------------------------------------------------------------ the loop
    def train(self) -> TrainResult:
        cfg = self.cfg
        self.run_dir.mkdir(parents=True, exist_ok=True)
        start_step, eval_history = 0, []
        ckpt = latest_checkpoint(self.run_dir)
        if ckpt is not None and not cfg.trainer.resume:
            raise UnsupportedConfigError(
                f"run directory {self.run_dir} already has checkpoints: pass trainer.resume=true to continue it, "
                "or a new trainer.name"
            )
        self.run_store = self._open_run_store(ckpt)
        try:
            self._setup()
            result = self._train(start_step, eval_history, ckpt)
        except BaseException as exc:
            if self.run_store is not None:
                self.run_store.fail(exc)
            raise
        finally:
            self._close()
        if self.run_store is not None:
            self.run_store.finish(asdict(result))
        return result

    def _open_run_store(self, ckpt: Path | None) -> RunWriter | None:
        """This run's row in the run store (a resumed run continues its own); None when it is turned off."""
        t = self.cfg.trainer
        if not t.store_enabled:
            return None
        return RunWriter.start(
            t.store or default_store_path(t.run_dir),
            kind="train",
            name=t.name,
            config=self.cfg.model_dump(),
            model=self.cfg.model.path,
            task=self.cfg.data.task,
            location=self.run_dir,
            resume_from_step=load_loop_state(ckpt)["step"] if ckpt is not None and t.resume else None,
            episodes_per_step=t.store_episodes_per_step,
        )

    def _train(self, start_step: int, eval_history: list[dict[str, float]], ckpt: Path | None) -> TrainResult:
        cfg = self.cfg
        dump_config(cfg, self.run_dir / "config.yaml")
        resume_from = ckpt if cfg.trainer.resume else None
        # Before the sinks open the file: lines a killed run wrote after its last checkpoint are redone, and a
        # run that starts at step 0 (a killed run that left no complete checkpoint) redoes all of them.
        redone_after = load_loop_state(resume_from)["step"] if resume_from is not None else -1
        _drop_metrics_after(self.run_dir / "metrics.jsonl", redone_after)
        sinks = build_sinks(
            cfg.trainer.loggers, self.run_dir, cfg.trainer.name, cfg.model_dump(), console_keys=CONSOLE_KEYS
        )
        if self.run_store is not None:
            sinks.append(self.run_store)
        result = TrainResult(run_dir=self.run_dir, steps=cfg.trainer.steps)
        with MetricsLogger(sinks) as metrics_logger:
            if resume_from is not None:
                self.backend.load_state(resume_from)
                state = load_loop_state(resume_from)
                start_step, eval_history = state["step"], state["eval_history"]
                self._sync_weights("resume")
                logger.info("resumed from %s at step %d", resume_from, start_step)
            elif cfg.eval.before:
                ev = self.evaluate(0)
                eval_history.append({"step": 0, **ev})
                metrics_logger.log(0, ev)
            t_loop = time.perf_counter()
            for step in range(start_step, cfg.trainer.steps):
                metrics = self.train_step(step)
                done = step + 1
                per_step = (time.perf_counter() - t_loop) / (done - start_step)
                metrics["time/eta_s"] = per_step * (cfg.trainer.steps - done)
                if cfg.eval.every_steps and done % cfg.eval.every_steps == 0 and done < cfg.trainer.steps:
                    ev = self.evaluate(done)
                    eval_history.append({"step": done, **ev})
                    metrics.update(ev)
                if cfg.eval.after and done == cfg.trainer.steps:
                    ev = self.evaluate(done)
                    eval_history.append({"step": done, **ev})
                    metrics.update(ev)
                metrics_logger.log(done, metrics)
                if (
                    cfg.trainer.checkpoint_every and done % cfg.trainer.checkpoint_every == 0
                ) or done == cfg.trainer.steps:
                    save_checkpoint(
                        self.run_dir,
                        done,
                        self.backend,
                        {"step": done, "eval_history": eval_history},
                        keep=cfg.trainer.keep_checkpoints,
                    )
        result.eval_history = eval_history
        accs = {h["step"]: h["eval/accuracy"] for h in eval_history}
        result.initial_accuracy = accs.get(0)
        result.final_accuracy = accs.get(cfg.trainer.steps)
        result.final_model_dir = self.run_dir / "final_model"
        self.backend.export_model(result.final_model_dir)
        self.engine.tokenizer.save_pretrained(result.final_model_dir)
        if cfg.trainer.plot and "jsonl" in cfg.trainer.loggers:
            _try_plot(self.run_dir)
        return result


class StaleSamplesError(RuntimeError):
    """A batch holds samples from older weights than the allowed staleness: training on them would be
    off-policy beyond what the loss corrects for."""


def check_staleness(episodes: list[Episode], version: int, max_staleness: int) -> None:
    """Refuse a batch with a sample drawn under a weight version older than ``version - max_staleness``."""
    oldest = min(
        (s.weight_version for e in episodes if not e.failed for t in e.trajectories for s in t.steps),
        default=version,
    )
    if oldest < version - max_staleness:
        stale = sum(
            s.weight_version < version - max_staleness
            for e in episodes
            if not e.failed
            for t in e.trajectories
            for s in t.steps
        )
        raise StaleSamplesError(
            f"{stale} sample(s) of this step were drawn under weight version {oldest}, but the policy is at "
            f"version {version} and rollout.max_staleness={max_staleness}: the engine is not sampling from the "
            "synced weights; refusing to train on them"
        )


def shapers_from_config(cfg: TrainConfig) -> list[Shaper]:
    """The reward shapers ``algorithm.shaping`` turns on."""
    sh = cfg.algorithm.shaping
    out: list[Shaper] = []
    if sh.format_regex is not None:
        out.append(format_bonus(sh.format_regex, bonus=sh.format_bonus, penalty=sh.format_penalty))
    if sh.overlong_buffer:
        out.append(
            overlong_penalty(
                max_tokens=cfg.rollout.max_tokens, buffer=sh.overlong_buffer, coef=sh.overlong_coef
            )
        )
    return out


def _estimator_names(estimator: str | dict[str, str]) -> set[str]:
    return set(estimator.values()) if isinstance(estimator, dict) else {estimator}


def _uses(estimator: str | dict[str, str], name: str) -> bool:
    return name in _estimator_names(estimator)


def episode_metrics(episodes: list[Episode]) -> dict[str, float]:
    """Rollout metrics of one step: reward, accuracy, lengths, termination reasons."""
    rewards = [e.reward or 0.0 for e in episodes]
    lengths = [len(s.response_ids) for e in episodes for t in e.trajectories for s in t.steps]
    out = summarize(rewards, "reward")
    out.update(summarize([float(x) for x in lengths] or [0.0], "response_len"))
    graded = [e.is_correct for e in episodes if e.is_correct is not None]
    if graded:
        out["accuracy"] = float(np.mean(graded))
    out["episodes"] = float(len(episodes))
    # What flows report per episode (assembly/*, signal/*, episode_time_s): averaged over the step.
    keys = sorted({k for e in episodes for k in e.metrics})
    for k in keys:
        vals = [e.metrics[k] for e in episodes if k in e.metrics]
        out[k if "/" in k else f"episode/{k}"] = float(np.mean(vals))
    for reason, n in Counter(e.termination_reason.value for e in episodes).items():
        out[f"termination/{reason}"] = n / len(episodes)
    out["episodes/failed"] = float(sum(e.failed for e in episodes))
    return out


def _drop_metrics_after(path: Path, step: int) -> None:
    """Forget the metric lines of steps after ``step`` (``-1``: every line), which this run is about to redo:
    a killed run wrote them after its last complete checkpoint. Lines cut short by the kill go too."""
    if not path.exists():
        return
    lines = path.read_text().splitlines()
    kept = []
    for line in lines:
        try:
            if json.loads(line).get("step", 0) <= step:
                kept.append(line)
        except json.JSONDecodeError:  # a line cut by the kill
            continue
    if len(kept) == len(lines):
        return
    logger.warning(
        "dropping %d line(s) of %s %s: a killed run wrote them and this run redoes them",
        len(lines) - len(kept),
        path,
        f"after step {step}" if step >= 0 else "(no checkpoint to resume)",
    )
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(k + "\n" for k in kept))
    tmp.replace(path)


def _try_plot(run_dir: Path) -> None:
    try:
        plot_metrics(
            run_dir / "metrics.jsonl",
            run_dir / "metrics.png",
            ["reward/mean", "eval/accuracy", "response_len/mean", "train/entropy"],
        )
    except ImportError:
        logger.info("matplotlib not installed; skipping metrics.png")
    except ValueError as exc:
        logger.info("no plot: %s", exc)
