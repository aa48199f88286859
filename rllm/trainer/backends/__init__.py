"""Training backends, by the name ``backend.name`` gives them. The loop asks this factory, never a class.

Each entry names the module and class lazily, so reading a backend's capabilities (the start-up checks)
imports no heavy dependency: ``distributed`` imports Ray only when it starts.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rllm.trainer.backends.base import BackendCapabilities, TrainingBackend
    from rllm.trainer.config import TrainConfig

__all__ = ["BACKENDS", "backend_capabilities", "backend_class", "build_backend"]

BACKENDS: dict[str, str] = {
    "local": "rllm.trainer.backends.local:LocalBackend",
    "distributed": "rllm.trainer.backends.distributed:DistributedBackend",
}


def backend_class(name: str) -> type[TrainingBackend]:
    """The backend class registered as ``name`` (``backend.name``)."""
    try:
        module, cls = BACKENDS[name].split(":")
    except KeyError:
        raise ValueError(
            f"backend.name={name!r} is not a backend: choose one of {', '.join(BACKENDS)}"
        ) from None
    return getattr(importlib.import_module(module), cls)


def backend_capabilities(name: str) -> BackendCapabilities:
    return backend_class(name).capabilities


def build_backend(cfg: TrainConfig, model_path: str, *, pad_id: int) -> TrainingBackend:
    """The training backend ``cfg.backend.name`` names, built for ``model_path``."""
    cls: Any = backend_class(cfg.backend.name)
    return cls(cfg, model_path, pad_id=pad_id)
