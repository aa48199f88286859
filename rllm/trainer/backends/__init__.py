"""Training backends, by the name ``backend.name`` gives them. The loop asks this registry, never a class.

``BACKENDS`` is a :class:`~rllm.utils.registry.Registry` (entry-point group ``rllm.backends``). Each entry
names its class lazily, so reading a backend's capabilities imports no heavy dependency (``distributed``
imports Ray only when it starts, ``tinker`` its SDK), and may declare an options model: the keys of the
``backend.<name>`` section, validated when the config loads. A new backend is one file::

    from rllm.trainer.backends import BACKENDS
    # torch (base imports the loss code): the config reads this registry, so the package stays light
    from rllm.trainer.backends.base import BackendCapabilities, TrainingBackend

    class MyOptions(BaseModel):            # its own section, backend.<name> (optional)
        endpoint: str = "..."

    class MyBackend(TrainingBackend):
        capabilities = BackendCapabilities(name="mine", ...)
        ...

    BACKENDS.register("mine", MyBackend, options=MyOptions)

and ``rllm train backend.name=mine`` runs it (``docs/plugins.md``). ``engine="name"`` in the register call
makes that inference engine the backend's default (a service that samples what it trains).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rllm.utils.registry import Registry

if TYPE_CHECKING:
    # torch (base imports the loss code): the config reads this registry, so the package stays light
    from rllm.trainer.backends.base import BackendCapabilities, TrainingBackend
    from rllm.trainer.config import TrainConfig

__all__ = ["BACKENDS", "backend_capabilities", "backend_class", "build_backend"]


def _check_backend_class(name: str, target: Any) -> None:
    # torch (base imports the loss code): the config reads this registry, so the package stays light
    from rllm.trainer.backends.base import BackendCapabilities, TrainingBackend

    if not (isinstance(target, type) and issubclass(target, TrainingBackend)):
        raise TypeError(f"backend {name!r}: register a TrainingBackend subclass, not {target!r}")
    if not isinstance(getattr(target, "capabilities", None), BackendCapabilities):
        raise TypeError(f"backend {name!r}: {target.__name__}.capabilities must be a BackendCapabilities")


BACKENDS: Registry[type[TrainingBackend]] = Registry(
    "backend", group="rllm.backends", key="backend.name", check=_check_backend_class
)
BACKENDS.register(
    "local",
    "rllm.trainer.backends.local:LocalBackend",
    description="PyTorch in this process (CPU or one GPU)",
)
BACKENDS.register(
    "distributed",
    "rllm.trainer.backends.distributed:DistributedBackend",
    options="rllm.trainer.config:DistributedConfig",
    description="FSDP2 ranks placed by Ray (backend.distributed.*)",
)
BACKENDS.register(
    "tinker",
    "rllm.trainer.backends.tinker:TinkerBackend",
    options="rllm.trainer.backends.tinker:TinkerOptions",
    engine="tinker",  # the service samples the weights it trains: inference.engine=tinker unless set
    description="a Tinker service: hosted, or `rllm serve tinker` (backend.tinker.*; LoRA only)",
)


def backend_class(name: str) -> type[TrainingBackend]:
    """The backend class registered as ``name`` (``backend.name``)."""
    return BACKENDS.get(name)


def backend_capabilities(name: str) -> BackendCapabilities:
    return backend_class(name).capabilities


def build_backend(cfg: TrainConfig, model_path: str, *, pad_id: int) -> TrainingBackend:
    """The training backend ``cfg.backend.name`` names, built for ``model_path``."""
    cls: Any = backend_class(cfg.backend.name)
    return cls(cfg, model_path, pad_id=pad_id)
