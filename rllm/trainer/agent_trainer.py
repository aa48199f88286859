"""``AgentTrainer``: the RL loop, written once above the backend API.

Per step, top to bottom (``train_step``): rollout (run episodes of the step's tasks: sample + score),
prepare the batch (shape rewards, group, filter, advantages, token rows: ``rllm.algorithms.prepare``),
update (forward/backward, optimizer step), sync the weights to the inference engine, log; then ``_train``
evaluates and checkpoints. Backends hide *how* a step runs, never *what* the loop does.

With ``rollout.max_staleness > 0`` the same steps run in a training thread while a rollout producer
(``rllm.trainer.async_rollout``) samples the next steps' episodes on the run's event loop: async is a
schedule around the same step, not another trainer.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rllm.algorithms.distill import distill_advantages
from rllm.algorithms.prepare import PreparedBatch, credit_signal, prepare_batch, reward_shapers
from rllm.algorithms.refill import fresh_tasks, refill_batch
from rllm.gateway.app import create_app
from rllm.gateway.server import GatewayServer
from rllm.gateway.traces import TraceStore
from rllm.gateway.upstreams import LocalUpstream
from rllm.inference.base import SamplingParams
from rllm.models import resolve_model
from rllm.rewards.shaping import Shaper, apply_shaping
from rllm.runner.workflow_runner import Workflow, WorkflowRunner, group_jobs, task_id_of
from rllm.sdk.decorators import Rollout
from rllm.sdk.workflow import GatewayWorkflow
from rllm.store import EpisodeJournal, RunWriter, default_store_path
from rllm.trainer.async_rollout import Job, RolloutProducer, StaleSamplesError, staleness_metrics
from rllm.trainer.backends import backend_capabilities, build_backend
from rllm.trainer.backends.base import UnsupportedConfigError, WeightSyncError
from rllm.trainer.checkpoint import drop_metrics_after, latest_checkpoint, load_loop_state, save_checkpoint
from rllm.trainer.checks import check_config, check_flow_roles
from rllm.trainer.config import FlowConfig, TrainConfig, adapter_names, role_adapters, tracker_options
from rllm.trainer.distill import Teacher, build_teacher
from rllm.trainer.engines import build_engine
from rllm.trainer.monitors import Monitors
from rllm.trainer.profiler import StepProfiler
from rllm.trainer.project import config_tasks, load_flow
from rllm.trainer.recovery import batch_summary, journaled_jobs
from rllm.trainer.reporting import CONSOLE_KEYS, episode_metrics, eval_metrics, try_plot
from rllm.trainer.workflows import build_workflow
from rllm.types import Episode
from rllm.utils.allocator import pin_mmap_threshold, release_free_memory
from rllm.utils.config import dump_config
from rllm.utils.event_loop import RunLoop
from rllm.utils.metrics import MetricsLogger, build_sinks
from rllm.utils.openmp import release_openmp_threads
from rllm.utils.timing import Span, timed

logger = logging.getLogger(__name__)


@dataclass
class TrainResult:
    """What a finished run reports: held-out greedy accuracy before/after and where things were written."""

    run_dir: Path
    steps: int
    eval_history: list[dict[str, float]] = field(default_factory=list)
    initial_accuracy: float | None = None
    final_accuracy: float | None = None
    final_model_dir: Path | None = None
    # With roles: adapter -> its merged model (final_model/<adapter>/); empty without roles.
    adapter_models: dict[str, Path] = field(default_factory=dict)

    def accuracy_line(self) -> str:
        """``held-out accuracy: 3.0% -> 93.5%``, an unmeasured end (``eval.before/after=false``) as
        ``not measured``: what the example scripts print."""

        def text(acc: float | None) -> str:
            return "not measured" if acc is None else f"{acc:.1%}"

        return f"held-out accuracy: {text(self.initial_accuracy)} -> {text(self.final_accuracy)}"


class AgentTrainer:
    """Trains the policy behind ``workflow`` on ``train_tasks``; evaluates greedily on ``test_tasks``.

    With no workflow it runs the one ``workflow.name`` names (a built-in workflow, an environment, or your
    ``workflow.flow``); with no tasks it reads ``data.train_file`` / ``data.test_file``, else ``data.task``.
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
        capabilities = backend_capabilities(config.backend.name)
        check_config(config, capabilities)
        if isinstance(config.workflow, FlowConfig):  # the project's own code, named in the config
            if workflow is not None:
                raise UnsupportedConfigError(
                    "workflow.name=flow names a flow, but a workflow was passed to AgentTrainer too: drop one"
                )
            workflow, evaluator = load_flow(config)
        # An @rllm.rollout flow talks to the model over HTTP: the trainer serves its engine behind an
        # embedded gateway and runs the flow through a GatewayWorkflow (one session per episode).
        self.agent_flow = workflow if isinstance(workflow, Rollout) else None
        if config.roles and self.agent_flow is not None:  # see checks._check_roles
            check_flow_roles(config)
        if evaluator is not None and self.agent_flow is None:
            raise TypeError("evaluator= goes with an @rllm.rollout flow; a workflow scores its own episodes")
        self.evaluator = evaluator
        self.gateway: Any = None
        if workflow is not None and config.workflow.name not in ("single_turn", "flow"):
            raise UnsupportedConfigError(
                f"workflow.name={config.workflow.name} names a built-in workflow, but a workflow was passed to "
                "AgentTrainer too: drop one of them"
            )
        self.workflow = workflow or build_workflow(config)
        # Applied before advantages: the shapers algorithm.shaping turns on, then the caller's own.
        shapers = reward_shapers(config.algorithm.shaping, max_tokens=config.rollout.max_tokens)
        self.shapers = shapers + list(reward_shaping or [])
        self._caller_shapers = len(reward_shaping or [])  # recorded for replay, which cannot rerun them
        if train_tasks is None:
            train_tasks = config_tasks(config, "train")
        if test_tasks is None:
            test_tasks = config_tasks(config, "test")
        self.train_tasks, self.test_tasks = train_tasks, test_tasks
        if not self.train_tasks:
            raise ValueError("no training tasks: pass train_tasks or set data.train_size > 0")
        self.run_dir = Path(config.trainer.run_dir) / config.trainer.name
        self.run_store: RunWriter | None = None  # opened by train()
        # Every finished episode, persisted as it finishes (opened by train()): a resumed step reuses them.
        self.journal: EpisodeJournal | None = None
        self._job_keys: dict[int, dict[str, str]] = {}  # step -> episode id -> its job key
        self._reused: dict[int, int] = {}  # step -> episodes taken from the journal
        # The run's one event loop (made on first use, closed with the run): every rollout and eval phase
        # runs on it, so agent code that caches an async client across episodes and steps keeps working.
        self._loop = RunLoop()
        self._producer: RolloutProducer | None = None  # async mode's sampler, while the steps run
        self.teacher: Teacher | None = None  # algorithm.distill's, built by _setup
        # Async mode: step -> seconds the producer spent picking its tasks; the engine's generated-token count
        # when the last step took its episodes, and a span since then (perf/rollout_tokens_per_s).
        self._data_s: dict[int, float] = {}
        self._generated_mark: tuple[int, Span] | None = None
        self._order: list[int] = []
        self._order_epoch = -1
        # Resolved here, after the cheap checks, so a wrong model path fails at start-up (pulling a
        # built-in model on first use) rather than after the run has begun loading things.
        # A service backend (tinker) is given the name its service resolves.
        self.model_path = resolve_model(config.model.path) if capabilities.loads_model else config.model.path

    # ------------------------------------------------------------------ setup
    def _setup(self) -> None:
        cfg = self.cfg
        pin_mmap_threshold()  # before the engine and the policy load: steps free memory back (rllm.utils.allocator)
        if cfg.trainer.threads:
            torch.set_num_threads(cfg.trainer.threads)
        random.seed(cfg.trainer.seed)
        np.random.seed(cfg.trainer.seed)
        # Both come from factories keyed by config (backend.name, inference.engine); the loop below is the
        # same for every pair. Closed in train()'s finally, so a failed start leaves nothing running.
        self.engine = build_engine(cfg, self.model_path, run_dir=self.run_dir)
        self.backend = build_backend(cfg, self.model_path, pad_id=self.engine.pad_id)
        device = cfg.backend.device
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        # Memory, MFU and torch.profiler traces per step (rllm.trainer.profiler).
        self.profiler = StepProfiler(
            cfg,
            self.model_path,
            self.run_dir,
            device=device,
            loads_model=backend_capabilities(cfg.backend.name).loads_model,
            backend=self.backend,  # what it measures per step (the distributed ranks' time in collectives)
        )
        # algorithm.distill's teacher (None without one), checked against the student's tokenizer.
        self.teacher = build_teacher(cfg, self.engine.tokenizer, pad_id=self.engine.pad_id)
        caps = self.engine.capabilities
        if getattr(self.workflow, "needs_constraints", False) and not caps.constraints:
            raise UnsupportedConfigError(
                f"workflow.name={cfg.workflow.name} holds replies to a grammar, which the {caps.name} engine "
                "cannot do: use the local engine, or turn the grammar off (workflow.constrain_final=false)"
            )
        if cfg.rollout.max_staleness and caps.keeps_versions:
            # A vLLM pool keeps the adapters of the versions that calls in flight may still be sampling from.
            self.engine.keep_versions = cfg.rollout.max_staleness + 1
        if self.backend.lora and (caps.weight_transfer != "tensors" or self.backend.adapter_names):
            # Servers in other processes (or a service) start from the base weights; a LoRA run's requests name
            # its adapter, so the version-0 adapter is loaded now: a server that cannot take it fails here,
            # before any rollout. With roles every engine is handed the adapters the roles' calls will name.
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
        self.monitors = Monitors(
            cfg.monitor, temperature=r.temperature, set_temperature=self._set_temperature
        )
        workflow = self.workflow
        if self.agent_flow is not None:
            workflow = self._start_gateway()
        self.runner = WorkflowRunner(
            workflow,
            self.engine,
            self.train_sampling,
            max_concurrency=r.max_concurrency,
            timeout_s=r.timeout_s,
            retries=r.retries,
            adapters=role_adapters(cfg.roles) if cfg.roles else None,  # each role samples its own adapter
        )

    def _start_gateway(self) -> Workflow:
        if self.engine.capabilities.own_gateway:  # the engine's own gateway(s) (a vLLM pool)
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
        # With roles, a call samples from the adapter of its session's role ({episode}:{role}).
        adapters = role_adapters(self.cfg.roles) if self.cfg.roles else None
        upstream = LocalUpstream(self.engine, adapters=adapters)
        app = create_app(upstream, self.trace_store, model_name=self.cfg.model.path)
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
        """Stop what the run started: the embedded gateway, the engine's servers, the backend's workers,
        the run's event loop, the journal."""
        self._stop_gateway()
        for part in ("engine", "backend", "teacher", "profiler"):
            built = getattr(self, part, None)  # None when start-up failed before building it
            if built is not None:
                try:
                    built.close()
                except Exception:  # closing must not hide the error that ended the run
                    logger.exception("closing the %s failed", part)
        self._loop.close()
        if self.journal is not None:
            self.journal.close()
            self.journal = None

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
        """Greedy accuracy (and reward, lengths, flow metrics) on the held-out tasks at ``step``."""
        release_openmp_threads()  # as for a rollout: this thread waits
        with timed("eval") as span:
            episodes = self._loop.run(
                self.runner.run_tasks(
                    self.test_tasks, sampling=self.eval_sampling, description=f"eval@{step}"
                )
            )
            out = eval_metrics(episodes, span.seconds)
        logger.info(
            "eval at step %d: accuracy %.3f on %d held-out tasks", step, out["eval/accuracy"], len(episodes)
        )
        return out

    # ------------------------------------------------------------------ one step
    def train_step(self, step: int) -> dict[str, float]:
        """One RL step on the current policy; returns the step's metrics."""
        metrics: dict[str, float] = {}
        profiler = self.profiler  # memory per phase, MFU, torch.profiler traces (rllm.trainer.profiler)
        with profiler.trace(step + 1), timed("step", metrics):
            # 1. Rollout: group_size episodes of each of the step's tasks, sampled and scored.
            with profiler.phase("rollout", metrics):
                episodes = self._rollout(step, metrics)
            # An engine that missed a weight sync samples an older policy: refuse before learning from it.
            check_staleness(episodes, self.backend.step, self.cfg.rollout.max_staleness)
            batch_episodes, shapers = episodes, self.shapers
            if self.cfg.algorithm.filters.refill_rounds:
                # 1b. Refill (DAPO): more tasks until the batch has enough with signal; shaped here, since
                #     shaping decides which have signal. `episodes` is then everything sampled.
                episodes, batch_episodes = self._refill(step, episodes, metrics)
                shapers = ()
            with timed("train", metrics) as train, profiler.phase("train", metrics):
                # 2. Prepare the batch: shape rewards, group the attempts at each task, drop what carries no
                #    signal, compute advantages, lay the steps out as token rows; a teacher's term (distill).
                prepared = self._prepare(batch_episodes, shapers, metrics)
                # 3. Update: one optimizer step (no signal: the step still advances data, LR and version).
                if prepared.empty:
                    logger.info("step %d: every group was filtered out; skipping the update", step)
                    self.backend.skip_step()
                    metrics["train/skipped"] = 1.0
                else:
                    metrics.update(self._update(prepared))
                    metrics["perf/train_tokens_per_s"] = prepared.batch.num_tokens / max(train.seconds, 1e-9)
                # What replay checks: the batch's digests, its episodes' keys, the update's loss.
                self._record_batch(step, prepared, batch_episodes, metrics)
            # 4. Sync: the next rollout samples from the weights just trained.
            with timed("sync", metrics), profiler.phase("sync", metrics):
                self._sync_step(step)
            # 5. Log: the episodes' rewards, lengths and outcomes (after shaping, which adds shaping/*).
            metrics.update(episode_metrics(episodes))
            metrics.update(self.monitors.observe(episodes))  # what the drift and hacking checks read
            if self.run_store is not None:  # written with this step's metrics, in one transaction
                self.run_store.stage_episodes(step + 1, episodes, self.engine.tokenizer)
        metrics.update(profiler.step_metrics(metrics, synchronous=self._producer is None))
        return metrics

    def _prepare(self, episodes: list[Episode], shapers: Any, metrics: dict[str, float]) -> PreparedBatch:
        """The step's batch (the algorithm config's part: ``prepare_batch``); with ``algorithm.distill`` the
        teacher then scores the sampled tokens, and each token's advantage becomes (or gains)
        -coef x (student logprob - teacher logprob)."""
        with timed("prepare", metrics):
            prepared = prepare_batch(episodes, self.cfg.algorithm, shapers=shapers)
        metrics.update(prepared.metrics)
        if self.teacher is not None and not prepared.empty:
            metrics.update(self._distill(prepared))
        return prepared

    def _set_temperature(self, temperature: float) -> None:
        """Drift adaptation (``monitor.drift.adapt_temperature``): the next steps sample at ``temperature``, and
        the loss's logprobs are computed at it too (the local backend reads ``cfg.rollout.temperature`` at each
        pass), so the PPO ratio stays one between two policies at the same temperature."""
        self.cfg.rollout.temperature = temperature
        self.train_sampling = self.train_sampling.model_copy(update={"temperature": temperature})

    def _sync_step(self, step: int) -> None:
        """Sync after ``step``'s update; in async mode also tell the producer (which, without partial
        rollouts, first lets the episodes in flight finish)."""
        producer = self._producer
        if producer is not None:
            self._loop.run(producer.before_sync())
        self._sync_weights(f"step {step + 1}")
        if producer is not None:  # admit the steps the new version allows
            version = self.backend.step
            self._loop.call_soon(lambda: producer.synced(version))

    def _rollout(self, step: int, metrics: dict[str, float]) -> list[Episode]:
        """Run the step's episodes; add the rollout's time and speed (and a server pool's health) to
        ``metrics``."""
        release_openmp_threads()  # this thread waits for the rollout: the engine gets the cores (rllm.utils.openmp)
        if self._producer is not None:  # async: sampled ahead; the wait is the trainer's idle time
            with timed("rollout", metrics) as wait:
                episodes = self._loop.run(self._producer.episodes(step))
            metrics["time/trainer_idle_s"] = wait.seconds
            metrics["time/data_s"] = self._data_s.pop(step, 0.0)
            metrics.update(self._producer.take_metrics())
            # Tokens the producer generated since the last step, over the wall time since then.
            generated = self.engine.stats["generated_tokens"]
            if self._generated_mark is not None:
                before, since = self._generated_mark
                metrics["perf/rollout_tokens_per_s"] = (generated - before) / max(since.seconds, 1e-9)
            self._generated_mark = (generated, Span())
            metrics.update(staleness_metrics(episodes, self.backend.step))
            metrics.update(self.engine.metrics())
            return episodes
        with timed("data", metrics):
            tasks = self._tasks_for_step(step)
        generated_before = self.engine.stats["generated_tokens"]
        with timed("rollout", metrics) as rollout:
            episodes = self._sample(tasks, step, f"step {step}")
        generated = self.engine.stats["generated_tokens"] - generated_before
        metrics["perf/rollout_tokens_per_s"] = generated / max(rollout.seconds, 1e-9)
        metrics.update(
            self.engine.metrics()
        )  # a server pool: servers healthy, calls re-routed after a failure
        return episodes

    def _sample(
        self, tasks: list[dict[str, Any]], step: int, description: str, round: int = 0
    ) -> list[Episode]:
        """``group_size`` scored episodes of each task, under the step's own seed (refill round ``round``'s
        for a refill): a resumed run samples exactly what an uninterrupted one would have.

        Job j of round r is "r<r>:<j>" in the journal: each is journaled as it finishes, and a resumed step
        takes the ones a killed run finished and samples only the rest."""
        done = journaled_jobs(self.journal, step, round, tasks, self.cfg.rollout.group_size)
        self._note_reused(step, round, done)
        return self._loop.run(
            self.runner.run_tasks(
                tasks,
                group_size=self.cfg.rollout.group_size,
                sampling=self._sampling(step, round),
                description=description,
                on_episode=lambda j, episode: self._journal_episode(step, f"r{round}:{j}", episode),
                done=done,
            )
        )

    def _journal_episode(self, step: int, key: str, episode: Episode) -> None:
        """Persist a finished episode as job ``key`` of ``step`` (called as each finishes, on the loop)."""
        self._job_keys.setdefault(step, {})[episode.id] = key
        if self.journal is not None:
            self.journal.record(step, key, episode)

    def _note_reused(self, step: int, round: int, done: dict[int, Episode]) -> None:
        """Key and count the journaled episodes a resumed step takes instead of sampling them."""
        keys = self._job_keys.setdefault(step, {})
        keys.update({episode.id: f"r{round}:{index}" for index, episode in done.items()})
        self._reused[step] = self._reused.get(step, 0) + len(done)

    def _sampling(self, step: int, round: int = 0) -> SamplingParams:
        """The training sampling params under the seed of (trainer seed, step, round); each job's own seed is
        derived from it (``group_jobs``)."""
        seed = self.cfg.trainer.seed * 7_919 + step * 1_000_003 + round * 100_003
        return self.train_sampling.model_copy(update={"seed": seed})

    def _jobs(self, tasks: list[dict[str, Any]], step: int, round: int = 0) -> list[Job]:
        """The ``(task, sampling)`` jobs ``_sample`` runs for ``tasks`` (the async producer runs the same)."""
        return group_jobs(tasks, self.cfg.rollout.group_size, self._sampling(step, round))

    def _record_batch(
        self, step: int, prepared: PreparedBatch, batch_episodes: list[Episode], metrics: dict[str, float]
    ) -> None:
        """Journal what ``step`` trained on and what the update returned (``rllm replay`` checks it), and
        add ``rollout/reused_episodes`` (episodes a killed run had finished) to ``metrics``."""
        keys = self._job_keys.pop(step, {})
        metrics["rollout/reused_episodes"] = float(self._reused.pop(step, 0))
        if self.journal is not None:
            summary = batch_summary(step, prepared, [keys[e.id] for e in batch_episodes], metrics)
            summary.update(sampled=len(keys), pad_id=self.engine.pad_id, caller_shapers=self._caller_shapers)
            # The step's sampling temperature (monitor.drift.adapt_temperature may change it): replay uses it.
            summary["temperature"] = self.cfg.rollout.temperature
            self.journal.record_batch(step, summary)

    def _refill(
        self, step: int, episodes: list[Episode], metrics: dict[str, float]
    ) -> tuple[list[Episode], list[Episode]]:
        """DAPO's dynamic sampling (``rllm.algorithms.refill``): shape the step's episodes, then sample refill
        rounds of tasks the step has not sampled until ``rollout.batch_size`` tasks have signal, at most
        ``algorithm.filters.refill_rounds`` rounds. Returns (every episode sampled, the batch's episodes)."""
        cfg = self.cfg
        apply_shaping(episodes, self.shapers)
        used = {e.task_id for e in episodes}

        def sample_round(round: int) -> list[Episode]:
            # Deterministic in (seed, step, round), apart from the step's own data order.
            key = f"refill-{cfg.trainer.seed}-{step}-{round}"
            tasks = fresh_tasks(
                self.train_tasks, cfg.rollout.batch_size, key=key, used=used, task_id=task_id_of
            )
            new = self._sample(tasks, step, f"step {step} refill {round}", round) if tasks else []
            apply_shaping(new, self.shapers)
            return new

        with timed("refill", metrics):
            result = refill_batch(
                episodes,
                target=cfg.rollout.batch_size,
                max_rounds=cfg.algorithm.filters.refill_rounds,
                sample_round=sample_round,
                filters=cfg.algorithm.filters,
                signal=credit_signal(cfg.algorithm.credit, cfg.algorithm.gamma),
            )
        metrics.update(result.metrics)
        return result.sampled, result.batch

    def _distill(self, prepared: PreparedBatch) -> dict[str, float]:
        """The teacher's logprobs of the batch's tokens turned into advantages (``rllm.algorithms.distill``);
        returns the distill/* metrics."""
        d = self.cfg.algorithm.distill
        assert self.teacher is not None and prepared.batch is not None
        with timed("teacher") as span:
            teacher_logprobs = self.teacher.logprobs(prepared.batch)
        out = distill_advantages(prepared.batch, teacher_logprobs, coef=d.coef, mode=d.mode)
        out["distill/teacher_s"] = span.seconds
        return out

    def _update(self, prepared: PreparedBatch) -> dict[str, float]:
        """Forward/backward over the prepared batch, then one optimizer step; returns the train/* metrics."""
        cfg, batch = self.cfg, prepared.batch
        out: dict[str, float] = {}
        # The ratio's behaviour logprobs: the engine's (already in the batch) or a trainer pass before the update.
        old = None
        if cfg.backend.old_logprobs == "recompute":
            with timed("old_logprobs", out):
                old = self.backend.compute_logprobs(batch)
        if old is not None and self.run_store is not None:  # shown beside the rollout's in the token view
            prepared.record_trainer_logprobs(old)
        # The frozen reference model's logprobs, only for a loss with a KL term to it.
        ref = None
        if cfg.algorithm.loss.kl_coef > 0:
            with timed("ref_logprobs", out):
                ref = self.backend.compute_logprobs(batch, reference=True)
        with timed("forward_backward", out):
            out.update(
                self.backend.forward_backward(batch, cfg.algorithm.loss, old_logprobs=old, ref_logprobs=ref)
            )
        with timed("optim", out):
            out.update(self.backend.optim_step())
        update_s = sum(
            out.get(f"time/{k}_s", 0.0) for k in ("old_logprobs", "ref_logprobs", "forward_backward", "optim")
        )
        # The forward-only passes besides forward/backward: the recomputed old logprobs, the reference's.
        forward_passes = (old is not None) + (ref is not None)
        out.update(self.profiler.update_metrics(batch, update_s, forward_passes))
        return out

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
            self.journal = EpisodeJournal(self.run_dir / "journal.db")
            if not cfg.trainer.resume:  # a fresh start: what a killed run left is not this run's
                self.journal.clear()
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

    def _run_steps(
        self,
        start_step: int,
        eval_history: list[dict[str, float]],
        metrics_logger: Any,
        stop: threading.Event | None = None,
    ) -> None:
        """Steps ``start_step`` .. ``trainer.steps - 1``, each logged, evaluated and checkpointed as configured.
        ``stop`` (async mode's training thread): set when the run is being torn down; no new step starts."""
        cfg = self.cfg
        with timed("loop") as loop:
            for step in range(start_step, cfg.trainer.steps):
                if stop is not None and stop.is_set():
                    raise RuntimeError(f"the run was stopped before step {step}")
                metrics = self.train_step(step)
                done = step + 1
                # The mean time per step so far (evals and checkpoints included) times the steps left.
                metrics["time/eta_s"] = loop.seconds / (done - start_step) * (cfg.trainer.steps - done)
                if self._evaluates_at(done):
                    ev = self.evaluate(done)
                    eval_history.append({"step": done, **ev})
                    metrics.update(ev)
                # The monitors' verdicts on the step (and its eval): alerts, drift scores, temperature.
                metrics.update(self.monitors.check(done, metrics))
                metrics_logger.log(done, metrics)
                if (
                    cfg.trainer.checkpoint_every and done % cfg.trainer.checkpoint_every == 0
                ) or done == cfg.trainer.steps:
                    save_checkpoint(
                        self.run_dir,
                        done,
                        self.backend,
                        {
                            "step": done,
                            "eval_history": eval_history,
                            "monitors": self.monitors.state_dict(),
                            **self._workflow_state(),
                        },
                        keep=cfg.trainer.keep_checkpoints,
                    )

    async def _run_steps_async(
        self, start_step: int, eval_history: list[dict[str, float]], metrics_logger: Any
    ) -> None:
        """Async mode: the same steps in a training thread, while the rollout producer samples ahead on this
        loop (the steps' rollouts, evals and refills reach the loop through ``RunLoop.run``)."""
        r = self.cfg.rollout
        producer = RolloutProducer(
            self.runner,
            self._sample_ahead,
            self._resample,
            start=start_step,
            end=self.cfg.trainer.steps,
            version=self.backend.step,
            max_staleness=r.max_staleness,
            max_concurrency=r.max_concurrency,
            partial=r.partial_rollouts,
        )
        self._producer = producer
        producer.start_producing()
        stop = threading.Event()
        try:
            await asyncio.to_thread(self._run_steps, start_step, eval_history, metrics_logger, stop)
        finally:
            # Also on Ctrl-C / SIGTERM (the run's loop is then closed, cancelling this): the training thread
            # starts no new step, so closing the loop does not wait for the rest of the run.
            stop.set()
            self._producer = None
            await producer.stop()

    async def _sample_ahead(self, step: int) -> list[Episode]:
        """Async mode: ``step``'s episodes, as ``_sample`` gives them (the same jobs, journaled as they finish,
        a resumed step's journaled ones reused), each run through the producer's shared slots."""
        producer = self._producer
        assert producer is not None
        with timed("data") as data:
            tasks = self._tasks_for_step(step)
        self._data_s[step] = data.seconds
        jobs = self._jobs(tasks, step)
        done = journaled_jobs(self.journal, step, 0, tasks, self.cfg.rollout.group_size)

        async def one(j: int) -> Episode:
            episode = await producer.run_job(*jobs[j])
            self._journal_episode(step, f"r0:{j}", episode)
            return episode

        self._note_reused(step, 0, done)
        todo = [j for j in range(len(jobs)) if j not in done]
        out = {**done, **dict(zip(todo, await asyncio.gather(*(one(j) for j in todo))))}
        return [out[j] for j in range(len(jobs))]

    async def _resample(self, step: int, round: int, index: int) -> Episode:
        """Async mode: job ``index`` of ``step`` sampled again (fresh seeds) to replace a stale episode;
        journaled as job "stale<round>:<index>"."""
        producer = self._producer
        assert producer is not None
        task, params = self._jobs(self._tasks_for_step(step), step, 10_000 + round)[index]
        episode = await producer.run_job(task, params)
        self._journal_episode(step, f"stale{round}:{index}", episode)
        return episode

    def _workflow_state(self) -> dict[str, Any]:
        """What a stateful workflow (one with ``state_dict()``, e.g. the coordinator's capability table)
        keeps across steps, for the checkpoint's loop state (JSON); nothing for a stateless one."""
        state_dict = getattr(self.workflow, "state_dict", None)
        return {"workflow": state_dict()} if callable(state_dict) else {}

    def _load_workflow_state(self, state: dict[str, Any]) -> None:
        """Give a resumed workflow back what it kept (a checkpoint of a stateful workflow has it)."""
        load = getattr(self.workflow, "load_state_dict", None)
        if "workflow" in state and callable(load):
            load(state["workflow"])

    def _evaluates_at(self, done: int) -> bool:
        """Whether the held-out eval runs after ``done`` steps: every ``eval.every_steps``, and at the end
        with ``eval.after``."""
        ev, steps = self.cfg.eval, self.cfg.trainer.steps
        if done == steps:
            return ev.after
        return bool(ev.every_steps) and done % ev.every_steps == 0

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
            task=self.cfg.data.train_file or self.cfg.data.task,
            location=self.run_dir,
            resume_from_step=self._resumes_at(ckpt),
            episodes_per_step=t.store_episodes_per_step,
        )

    def _resumes_at(self, ckpt: Path | None) -> int | None:
        """The step a resumed run starts at (0 when it found no complete checkpoint: it starts over, in the
        same run-store run, since the journaled episodes it reuses are already recorded there); None when
        it does not resume."""
        if not self.cfg.trainer.resume:
            return None
        return load_loop_state(ckpt)["step"] if ckpt is not None else 0

    def _train(self, start_step: int, eval_history: list[dict[str, float]], ckpt: Path | None) -> TrainResult:
        cfg = self.cfg
        dump_config(cfg, self.run_dir / "config.yaml")
        resume_from = ckpt if cfg.trainer.resume else None
        # Before the sinks open the file: lines a killed run wrote after its last checkpoint are redone, and a
        # run that starts at step 0 (a killed run that left no complete checkpoint) redoes all of them.
        redone_after = load_loop_state(resume_from)["step"] if resume_from is not None else -1
        drop_metrics_after(self.run_dir / "metrics.jsonl", redone_after)
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
        result = TrainResult(run_dir=self.run_dir, steps=cfg.trainer.steps)
        with MetricsLogger(sinks) as metrics_logger:
            if resume_from is not None:
                self.backend.load_state(resume_from)
                state = load_loop_state(resume_from)
                start_step, eval_history = state["step"], state["eval_history"]
                self._load_workflow_state(state)
                self.monitors.load_state_dict(state.get("monitors"))
                self._sync_weights("resume")
                logger.info("resumed from %s at step %d", resume_from, start_step)
            elif cfg.eval.before:
                ev = self.evaluate(0)
                eval_history.append({"step": 0, **ev})
                metrics_logger.log(0, {**ev, **self.monitors.check(0, ev)})
            if cfg.rollout.max_staleness > 0:
                self._loop.run(self._run_steps_async(start_step, eval_history, metrics_logger))
            else:
                self._run_steps(start_step, eval_history, metrics_logger)
            result.final_model_dir = self.run_dir / "final_model"
            release_free_memory()  # the export's model copy starts without the last eval's freed blocks
            self.backend.export_model(result.final_model_dir)
            # With roles, one model per adapter (final_model/<adapter>/), each with the tokenizer.
            result.adapter_models = {n: result.final_model_dir / n for n in adapter_names(cfg.roles)}
            for model_dir in list(result.adapter_models.values()) or [result.final_model_dir]:
                self.engine.tokenizer.save_pretrained(model_dir)
            # W&B / MLflow keep the model with the run (rllm.utils.trackers); the other sinks are not called.
            metrics_logger.log_final_model(result.final_model_dir, self.run_dir / "config.yaml")
        result.eval_history = eval_history
        accs = {h["step"]: h["eval/accuracy"] for h in eval_history}
        result.initial_accuracy = accs.get(0)
        result.final_accuracy = accs.get(cfg.trainer.steps)
        if cfg.trainer.plot and "jsonl" in cfg.trainer.loggers:
            try_plot(self.run_dir)
        return result


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
