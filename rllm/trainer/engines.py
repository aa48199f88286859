"""Inference engines, by the name ``inference.engine`` gives them. The loop asks this registry, never a class.

``ENGINES`` is a :class:`~rllm.utils.registry.Registry` (entry-point group ``rllm.engines``) of engine
plug-ins: a class with ``check_config(cfg)`` (start-up refusals of its own) and ``build(cfg, model_path,
run_dir=...)`` (the engine, ready to sample), registered with the engine's capabilities (an
:class:`~rllm.inference.base.EngineCapabilities`; given as ``"module:Engine.capabilities"`` they are read
without building anything, or as the plug-in class's own ``capabilities``). An options model, if
registered, is the ``inference.<name>`` section. This module imports no engine: the config reads the
names and options here.

- ``local``: :class:`~rllm.inference.local.LocalEngine`, batched sampling in this process; weights arrive as
  tensors after every optimizer step.
- ``vllm``: :class:`~rllm.trainer.vllm_pool.VLLMPoolEngine`, a pool of vLLM OpenAI servers (started here,
  or attached by URL) behind the gateway; every call, from built-in workflows and ``@rllm.rollout`` agents
  alike, goes through the gateway and is traced; weights arrive as files (a LoRA adapter hot-loaded into
  every server, or a full model).
- ``tinker``: the sampling client of a Tinker service (``rllm.trainer.backends.tinker``), which samples from
  the weights the tinker backend trains (weight transfer ``service``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from rllm.inference.base import EngineCapabilities, InferenceEngine
from rllm.trainer.backends.base import UnsupportedConfigError
from rllm.utils.registry import Registry

if TYPE_CHECKING:
    from rllm.trainer.config import TrainConfig

__all__ = ["ENGINES", "EnginePlugin", "build_engine", "engine_capabilities"]


class EnginePlugin(Protocol):
    """What ``ENGINES`` holds: the engine's start-up checks and how to build it."""

    @classmethod
    def check_config(cls, cfg: TrainConfig) -> None: ...

    @classmethod
    def build(cls, cfg: TrainConfig, model_path: str, *, run_dir: Path) -> InferenceEngine: ...


def _check_engine_plugin(name: str, target: Any) -> None:
    missing = [m for m in ("check_config", "build") if not hasattr(target, m)]
    if missing:
        raise TypeError(f"engine {name!r}: {target!r} lacks {', '.join(missing)} (see EnginePlugin)")


ENGINES: Registry[type[EnginePlugin]] = Registry(
    "inference engine", group="rllm.engines", key="inference.engine", check=_check_engine_plugin
)


class LocalEnginePlugin:
    """``inference.engine=local``: the local engine (``inference.dtype``, ``inference.max_batch_rows``)."""

    @classmethod
    def check_config(cls, cfg: TrainConfig) -> None:
        return None

    @classmethod
    def build(cls, cfg: TrainConfig, model_path: str, *, run_dir: Path) -> InferenceEngine:
        from rllm.inference.local import LocalEngine, pick_device  # transformers: only this engine needs it

        return LocalEngine.from_pretrained(
            model_path,
            device=str(pick_device(cfg.backend.device)),
            dtype=cfg.inference.dtype,
            max_batch_rows=cfg.inference.max_batch_rows,
            seed=cfg.trainer.seed,
        )


class VLLMEnginePlugin:
    """``inference.engine=vllm``: a pool of vLLM servers behind the gateway (``inference.vllm.*``)."""

    @classmethod
    def check_config(cls, cfg: TrainConfig) -> None:
        from rllm.trainer.vllm_pool import check_pool_config  # aiohttp and the gateway: vllm only

        check_pool_config(cfg)

    @classmethod
    def build(cls, cfg: TrainConfig, model_path: str, *, run_dir: Path) -> InferenceEngine:
        from rllm.trainer.vllm_pool import VLLMPoolEngine, VLLMPoolError  # aiohttp and the gateway: vllm only

        engine = VLLMPoolEngine.from_config(
            cfg,
            model_path,
            trace_store_path=run_dir / "traces.db",
            sync_dir=run_dir / "weight_sync",
            log_dir=run_dir / "vllm_logs",
        )
        try:
            return engine.start()  # leaves nothing running when it fails
        except VLLMPoolError as exc:  # a start-up refusal: one line, exit code 2
            raise UnsupportedConfigError(str(exc)) from None


ENGINES.register(
    "local",
    LocalEnginePlugin,
    capabilities="rllm.inference.local:LocalEngine.capabilities",
    description="batched sampling in this process",
)
ENGINES.register(
    "vllm",
    VLLMEnginePlugin,
    options="rllm.trainer.config:VLLMPoolConfig",
    capabilities="rllm.trainer.vllm_pool:VLLMPoolEngine.capabilities",
    description="a pool of vLLM servers behind the gateway (inference.vllm.*)",
)
ENGINES.register(
    "tinker",
    "rllm.trainer.backends.tinker:TinkerEnginePlugin",
    capabilities="rllm.trainer.backends.tinker:TinkerEngine.capabilities",
    description="the sampling client of a Tinker service (with backend.name=tinker)",
)


def engine_capabilities(name: str) -> EngineCapabilities:
    """What engine ``name`` can do, read without building it."""
    caps = ENGINES.plugin(name).capabilities
    if not isinstance(caps, EngineCapabilities):
        raise TypeError(f"engine {name!r} declares no EngineCapabilities")
    return caps


def build_engine(cfg: TrainConfig, model_path: str, *, run_dir: Path) -> InferenceEngine:
    """The inference engine ``cfg.inference.engine`` names, ready to sample from ``model_path``."""
    return ENGINES.get(cfg.inference.engine).build(cfg, model_path, run_dir=run_dir)
