"""Start-up checks of a training config: every refusal names the key to change, before anything loads.

Every name a config gives is checked before the model or any dataset loads, with a did-you-mean, at one
of two moments: the names rllm's own code defines (advantage estimators, losses, workflows, tools, loggers,
backends) when the config itself is validated (``TrainConfig``, so ``load_config`` and ``rllm train``
refuse them as they parse); the names looked up in registries that live on disk or grow at run time
(``data.task``, ``data.reward`` and the reward a registered dataset names) here, first thing in
``AgentTrainer(config)``.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

from rllm.algorithms.advantages import is_group_relative, takes_norm_std, takes_std
from rllm.algorithms.losses import POLICY_LOSSES
from rllm.data.registry import DatasetNotFoundError, DatasetRegistry
from rllm.envs.registry import is_env
from rllm.models import BUILTIN_MODELS
from rllm.rewards.registry import get_reward, reward_names
from rllm.sandbox import SandboxUnavailable, protections
from rllm.tools.named import tool_runs_code
from rllm.trainer.backends import BACKENDS
from rllm.trainer.backends._adapters import check_init_adapter
from rllm.trainer.backends.base import UnsupportedConfigError
from rllm.trainer.config import TrainConfig
from rllm.trainer.engines import ENGINES, engine_capabilities
from rllm.trainer.monitors import check_monitor_config
from rllm.utils.config import did_you_mean
from rllm.utils.metrics import SINKS


def check_config(cfg: TrainConfig, capabilities: Any) -> None:
    """Refuse, before anything loads, a config the backend cannot honour. One line per problem."""
    _check_capabilities(cfg, capabilities)
    _check_roles(cfg, capabilities)
    _check_backend(cfg, capabilities)
    _check_plugins(cfg, capabilities)
    _check_old_logprobs(cfg, capabilities)
    _check_estimators(cfg)
    if cfg.rollout.temperature == 0:
        raise UnsupportedConfigError(
            "rollout.temperature=0 samples one answer per task, leaving no signal: use > 0"
        )
    _check_env_pairing(cfg)
    _check_dataset(cfg)
    _check_shaping_and_credit(cfg)
    _check_store_and_loggers(cfg)
    _check_async(cfg)
    _check_distill(cfg)
    check_monitor_config(cfg)


def _check_distill(cfg: TrainConfig) -> None:
    """Distillation compares the distribution the student sampled from with the teacher's: untempered and
    untruncated. A local teacher path that does not exist is refused here, before any model loads."""
    d, r = cfg.algorithm.distill, cfg.rollout
    if not d.enabled:
        return
    if r.temperature != 1.0 or r.top_p != 1.0 or r.top_k != 0:
        raise UnsupportedConfigError(
            "algorithm.distill compares the student's sampling distribution with the teacher's, but the rollout "
            "logprobs are of a tempered or truncated one: use rollout.temperature=1, rollout.top_p=1, rollout.top_k=0"
        )
    if d.teacher is not None and d.teacher not in BUILTIN_MODELS:
        path = Path(d.teacher).expanduser()
        if d.teacher.startswith(("/", ".", "~")) and not (path / "config.json").is_file():
            raise UnsupportedConfigError(
                f"algorithm.distill.teacher={d.teacher} is not a model directory (no config.json there): pass a "
                "model directory, e.g. a run's final_model, or a built-in model name"
            )


def check_backend_config(cfg: TrainConfig, capabilities: Any) -> None:
    """The part of :func:`check_config` about the training backend alone (its loss, LoRA or full, its
    ``backend.*`` keys, its own refusals): what a run without rollouts (``rllm sft``) must pass."""
    _check_capabilities(cfg, capabilities)
    _check_backend(cfg, capabilities)
    _check_backend_keys(cfg, capabilities)
    BACKENDS.get(cfg.backend.name).check_config(cfg)


def _check_backend_keys(cfg: TrainConfig, capabilities: Any) -> None:
    """backend.* keys set that the backend does not read are refused, not ignored."""
    backend = cfg.backend.name
    unread = sorted(cfg.backend.model_fields_set - {"name", backend} - capabilities.backend_keys)
    if unread:
        raise UnsupportedConfigError(
            f"backend.name={backend} does not read backend.{', backend.'.join(unread)}: drop "
            f"{'it' if len(unread) == 1 else 'them'}"
        )


def _check_async(cfg: TrainConfig) -> None:
    """rollout.partial_rollouts only means something in async mode; async on vLLM needs hot-loaded adapters."""
    r = cfg.rollout
    if r.max_staleness == 0 and "partial_rollouts" in r.model_fields_set:
        raise UnsupportedConfigError(
            "rollout.partial_rollouts applies to async training only (rollout.max_staleness > 0); the "
            "synchronous loop never syncs weights with episodes in flight: drop it or set max_staleness"
        )
    full_sync_ok = engine_capabilities(cfg.inference.engine).full_sync_in_flight
    if r.max_staleness > 0 and not cfg.lora.enabled and not full_sync_ok:
        raise UnsupportedConfigError(
            f"async training on inference.engine={cfg.inference.engine} needs lora.enabled=true: an adapter "
            "hot-loads beside the requests in flight, while a full-model sync restarts or reloads the "
            "servers under them"
        )


def _check_capabilities(cfg: TrainConfig, capabilities: Any) -> None:
    """What the backend declares it can do: the loss, LoRA or full fine-tuning, a KL to a reference."""
    loss = cfg.algorithm.loss
    losses = POLICY_LOSSES.names() if capabilities.losses is None else sorted(capabilities.losses)
    if loss.name not in losses:
        raise UnsupportedConfigError(
            f"backend '{capabilities.name}' has no loss {loss.name!r}: choose one of {losses}"
        )
    if cfg.lora.enabled and not capabilities.lora:
        raise UnsupportedConfigError(
            f"backend '{capabilities.name}' cannot train LoRA: set lora.enabled=false"
        )
    if not cfg.lora.enabled and not capabilities.full_finetune:
        raise UnsupportedConfigError(f"backend '{capabilities.name}' trains LoRA only: set lora.enabled=true")
    if loss.kl_coef > 0 and not capabilities.kl_to_reference:
        raise UnsupportedConfigError(
            f"backend '{capabilities.name}' has no KL to a reference: set algorithm.loss.kl_coef=0"
        )


def _check_roles(cfg: TrainConfig, capabilities: Any) -> None:
    """Separate weights per role (``roles``): a LoRA adapter per role, so LoRA, a backend that trains several
    and an engine that samples from the one a call names; agent flows only through the embedded gateway."""
    if not cfg.roles:
        return
    if not cfg.lora.enabled:
        raise UnsupportedConfigError(
            "roles trains one LoRA adapter per role: set lora.enabled=true (or drop roles)"
        )
    if not capabilities.adapters:
        raise UnsupportedConfigError(
            f"backend '{capabilities.name}' trains one set of weights, not an adapter per role: drop roles "
            "(backend.name=local or distributed trains them)"
        )
    engine = cfg.inference.engine
    if not engine_capabilities(engine).adapters:
        raise UnsupportedConfigError(
            f"inference.engine={engine} cannot sample from a different adapter per call, which roles needs: "
            "drop roles or pick an engine that serves several adapters"
        )
    if cfg.workflow.name == "flow":
        check_flow_roles(cfg)
    for role, r in cfg.roles.items():
        if r.init_adapter is not None:  # the file and its shape now; the model's modules when it loads
            check_init_adapter(r.init_adapter, cfg.lora, f"roles.{role}.init_adapter")


def check_flow_roles(cfg: TrainConfig) -> None:
    """An ``@rllm.rollout`` flow with roles: its calls name their role by session (``{episode}:{role}``, the
    role's base URL), which the trainer's embedded gateway maps to the role's adapter. An engine with its
    own gateways (a vLLM pool) routes them itself and does not map roles yet: refused, rather than every
    role silently training one adapter."""
    engine = cfg.inference.engine
    if engine_capabilities(engine).own_gateway:
        raise UnsupportedConfigError(
            f"roles with an @rllm.rollout flow on inference.engine={engine}: its own gateways do not pick an "
            "adapter per role yet: drop roles, or run the flow on inference.engine=local"
        )


def _check_backend(cfg: TrainConfig, capabilities: Any) -> None:
    """backend.* knobs that exclude each other, or that this backend lacks."""
    if cfg.lora.enabled and cfg.backend.gradient_checkpointing and cfg.lora.dropout > 0:
        raise UnsupportedConfigError(
            "lora.dropout > 0 with backend.gradient_checkpointing=true recomputes different dropout masks in "
            "backward: set lora.dropout=0 or backend.gradient_checkpointing=false"
        )
    if cfg.backend.share_prefix and cfg.backend.gradient_checkpointing:
        raise UnsupportedConfigError(
            "backend.share_prefix keeps the prompt's KV cache for the backward pass, which gradient checkpointing "
            "cannot: set backend.share_prefix=false or backend.gradient_checkpointing=false"
        )
    if (
        cfg.backend.share_prefix
        and not capabilities.share_prefix
        and "share_prefix" in cfg.backend.model_fields_set
    ):
        raise UnsupportedConfigError(
            f"backend '{capabilities.name}' cannot share prompt prefixes: drop backend.share_prefix"
        )


def _check_old_logprobs(cfg: TrainConfig, capabilities: Any) -> None:
    if cfg.backend.old_logprobs == "recompute" and not capabilities.recompute_old_logprobs:
        raise UnsupportedConfigError(
            f"backend '{capabilities.name}' cannot recompute old logprobs: set backend.old_logprobs=rollout"
        )
    if cfg.algorithm.loss.tis_cap is not None and cfg.backend.old_logprobs != "recompute":
        raise UnsupportedConfigError(
            "algorithm.loss.tis_cap corrects between trainer and rollout logprobs, so it needs "
            "backend.old_logprobs=recompute"
        )


def _check_estimators(cfg: TrainConfig) -> None:
    """Group-relative estimators (they declare so) need groups; algorithm.std needs an estimator that
    divides by one (one that takes ``norm_std`` does so only with it)."""
    adv = cfg.algorithm.advantage
    estimators = set(adv.values() if isinstance(adv, dict) else [adv])
    group_relative = sorted(name for name in estimators if is_group_relative(name))
    if cfg.rollout.group_size < 2 and group_relative:
        raise UnsupportedConfigError(
            f"{'/'.join(group_relative)} compares episodes within a group: set rollout.group_size >= 2"
        )
    if cfg.rollout.group_size < 2 and cfg.algorithm.filters.refill_rounds:
        raise UnsupportedConfigError(
            "algorithm.filters.refill_rounds looks for groups with signal, and a group of one never has any: "
            "set rollout.group_size >= 2 or algorithm.filters.refill_rounds=0"
        )
    divides_by_std = any(
        takes_std(name) and (not takes_norm_std(name) or cfg.algorithm.norm_std) for name in estimators
    )
    if cfg.algorithm.std != type(cfg.algorithm).model_fields["std"].default and not divides_by_std:
        raise UnsupportedConfigError(
            "algorithm.std picks the std that grpo (with algorithm.norm_std=true) and reinforce_pp divide by, and "
            f"the estimator(s) in use ({', '.join(sorted(estimators))}) divide by none: drop algorithm.std"
        )


def _check_shaping_and_credit(cfg: TrainConfig) -> None:
    sh = cfg.algorithm.shaping
    if sh.overlong_buffer > cfg.rollout.max_tokens:
        raise UnsupportedConfigError(
            f"algorithm.shaping.overlong_buffer ({sh.overlong_buffer}) exceeds rollout.max_tokens ({cfg.rollout.max_tokens})"
        )
    if sh.format_regex is not None:
        try:
            re.compile(sh.format_regex)
        except re.error as exc:
            raise UnsupportedConfigError(
                f"algorithm.shaping.format_regex is not a valid regex: {exc}"
            ) from None
    if cfg.algorithm.gamma != 1.0 and cfg.algorithm.credit == "trajectory":
        raise UnsupportedConfigError(
            "algorithm.gamma discounts per-step returns: set algorithm.credit=per_step or per_state"
        )
    if cfg.algorithm.step_weight != 1.0 and cfg.algorithm.credit != "per_state":
        raise UnsupportedConfigError(
            "algorithm.step_weight weighs per_state credit's step level: set algorithm.credit=per_state"
        )


def _check_store_and_loggers(cfg: TrainConfig) -> None:
    t, default_sample = cfg.trainer, type(cfg.trainer).model_fields["store_episodes_per_step"].default
    if not t.store_enabled and (t.store is not None or t.store_episodes_per_step != default_sample):
        raise UnsupportedConfigError(
            "trainer.store and trainer.store_episodes_per_step apply to the run store, which "
            "trainer.store_enabled=false turns off: drop them (or enable the store)"
        )
    if t.store is not None and Path(t.store).is_dir():
        raise UnsupportedConfigError(
            f"trainer.store={t.store!r} is a directory: name the database file in it, "
            f"e.g. {Path(t.store) / 'rllm.db'}"
        )
    for sink in t.loggers:  # a sink that needs a package declares it (SinkRequirements)
        needs = SINKS.plugin(sink).capabilities
        module = getattr(needs, "module", None)
        if module and importlib.util.find_spec(module) is None:
            raise UnsupportedConfigError(
                f"trainer.loggers names {sink} but it is not installed: {needs.install} "
                f"(or drop it from trainer.loggers)"
            )


def _check_plugins(cfg: TrainConfig, capabilities: Any) -> None:
    """The backend and the engine the config names: a pair that can hand weights over, backend.* keys the
    backend reads, then each plug-in's own refusals (``check_config``: what its section asks, what this
    machine lacks)."""
    backend, engine = cfg.backend.name, cfg.inference.engine
    engine_caps = engine_capabilities(engine)
    if engine_caps.weight_transfer not in capabilities.weight_transfer:
        raise UnsupportedConfigError(
            f"backend.name={backend} hands weights over as {' or '.join(sorted(capabilities.weight_transfer))}, "
            f"and inference.engine={engine} takes {engine_caps.weight_transfer}: pick an engine that takes "
            f"them ({', '.join(_engines_taking(capabilities.weight_transfer)) or 'none registered'})"
        )
    _check_backend_keys(cfg, capabilities)
    r = cfg.rollout
    if (r.top_p < 1.0 or r.top_k) and not engine_caps.truncation_logprobs_exact:
        # e.g. vLLM's servers run with logprobs_mode=processed_logprobs: after top-k/top-p, so a logprob is
        # renormalised over the kept tokens, while the trainer's is over the whole vocabulary (the local
        # engine reports that one). The importance ratio would compare two different distributions.
        raise UnsupportedConfigError(
            f"rollout.top_p={r.top_p:g} / rollout.top_k={r.top_k} with inference.engine={engine}: its logprobs "
            "after top-p/top-k are not the full-vocabulary ones the trainer computes: set rollout.top_p=1.0 "
            "and rollout.top_k=0, or use inference.engine=local, which records the unrestricted logprobs"
        )
    BACKENDS.get(backend).check_config(cfg)
    ENGINES.get(engine).check_config(cfg)


def _engines_taking(modes: frozenset[str]) -> list[str]:
    return [name for name in ENGINES.names() if engine_capabilities(name).weight_transfer in modes]


def _check_env_pairing(cfg: TrainConfig) -> None:
    """An environment is played on its own task family, and its task family only by it: the rows carry
    what its ``env(task)`` reads and no reward of their own."""
    w, task = cfg.workflow.name, cfg.data.task
    if is_env(w) and task != w:
        raise UnsupportedConfigError(
            f"workflow.name={w} plays environment {w!r}, which needs its own tasks: set data.task={w}"
        )
    if is_env(task) and w != task:
        raise UnsupportedConfigError(
            f"data.task={task} holds the tasks of environment {task!r}, which only its own workflow "
            f"plays: set workflow.name={task}"
        )


def _check_dataset(cfg: TrainConfig) -> None:
    """data.task names a dataset with both splits and a reward rllm knows (or an environment that scores)."""
    d = cfg.data
    for key, path in (("train_file", d.train_file), ("test_file", d.test_file)):
        if path is not None and not Path(path).is_file():
            raise UnsupportedConfigError(f"data.{key}={path!r}: no such file (relative to {Path.cwd()})")
    if d.train_file is not None and d.test_file is not None:
        _check_file_reward(cfg)  # both splits come from the files: data.task is not read
        return
    try:
        info = DatasetRegistry().info(d.task)
    except DatasetNotFoundError as exc:  # its message says how to get the dataset (pull, register, list)
        raise UnsupportedConfigError(f"data.task={d.task!r} is not a known dataset: {exc}") from None
    for key, split in (("train_split", d.train_split), ("test_split", d.test_split)):
        if split not in info.splits:
            raise UnsupportedConfigError(
                f"data.{key}={split!r}: dataset {d.task!r} has splits {', '.join(info.splits)}"
                + did_you_mean(split, info.splits)
            )
    if d.reward is not None and d.reward not in reward_names():
        raise UnsupportedConfigError(
            f"data.reward={d.reward!r} is not a reward"
            + (did_you_mean(d.reward, reward_names()) or f": choose one of {', '.join(reward_names())}")
        )
    if d.reward is None and info.reward is not None and info.reward not in reward_names():
        raise UnsupportedConfigError(  # a user's reward, registered when the dataset was, not in this process
            f"dataset {d.task!r} is scored by reward {info.reward!r}, which is not registered: register it "
            "with rllm.rewards.registry.register_reward before training (or set data.reward)"
        )
    plays_env = is_env(cfg.workflow.name)  # the environment scores the episode: no reward to check
    if not plays_env and (d.reward or info.reward) is None:
        raise UnsupportedConfigError(f"dataset {d.task!r} names no reward: set data.reward")
    _check_sandbox(cfg, None if plays_env else d.reward or info.reward)


def _check_file_reward(cfg: TrainConfig) -> None:
    """Tasks from files are scored by your flow (workflow.name=flow) or by data.reward."""
    reward = cfg.data.reward
    if reward is not None and reward not in reward_names():
        raise UnsupportedConfigError(
            f"data.reward={reward!r} is not a reward"
            + (did_you_mean(reward, reward_names()) or f": choose one of {', '.join(reward_names())}")
        )
    if reward is None and cfg.workflow.name != "flow" and not is_env(cfg.workflow.name):
        raise UnsupportedConfigError(
            f"data.train_file's tasks name no reward for workflow.name={cfg.workflow.name}: set data.reward "
            "(e.g. number, math) or score them in your own flow (workflow.name=flow)"
        )
    _check_sandbox(cfg, reward)


def _check_sandbox(cfg: TrainConfig, reward: str | None) -> None:
    """What runs model-written code (the code reward, the python tool) has real isolation here, or was told
    to do without knowingly: refused now, before the model loads, not at the first episode. A named tool
    that runs code declares so (``ToolCapabilities.runs_code``)."""
    try:
        if reward is not None:
            get_reward(reward)  # building the code reward checks its sandbox
        if any(tool_runs_code(name) for name in getattr(cfg.workflow, "tools", ())):
            protections()
    except SandboxUnavailable as exc:
        raise UnsupportedConfigError(str(exc)) from None
