"""Build the Tinker service for one base model, and run it (``rllm serve tinker``, or in a thread)."""

from __future__ import annotations

import logging
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import uvicorn
from typing_extensions import Self

from rllm.inference.local import LocalEngine
from rllm.models import resolve_model
from rllm.serve.tinker.app import create_app
from rllm.serve.tinker.service import ServedModel, TinkerService
from rllm.serve.tinker.training import TrainSettings, linear_kinds

logger = logging.getLogger(__name__)

# --dtype: the sampler's dtype and the trainer's autocast. float32 keeps sampled and trained logprobs
# equal to float rounding; bfloat16 is faster where the hardware has it (and what hosted Tinker samples).
# The rllm training backends a served model can train on (each computes rllm's losses in this machine's
# processes and hands back the logprobs of its own forward pass).
SERVE_BACKENDS = ("local", "distributed")
DTYPES = {"auto": ("auto", "auto"), "float32": ("float32", "none"), "bfloat16": ("bfloat16", "bf16")}


@dataclass(frozen=True)
class ServeConfig:
    """What ``rllm serve tinker`` was started with."""

    model: str
    host: str = "127.0.0.1"
    port: int = 8000
    device: str = "auto"
    dtype: str = "auto"
    max_samplers: int = 4
    api_key: str | None = None
    state_dir: str = "tinker_state"
    micro_batch_size: int = 16
    backend: str = "local"  # each model's rllm training backend: local, or distributed (FSDP2 ranks on Ray)
    world_size: int = 2  # ranks per model with backend=distributed


def build_service(cfg: ServeConfig) -> TinkerService:
    """Resolve the model, load its sampler engine once (the base every snapshot copies), and set up."""
    if cfg.dtype not in DTYPES:
        raise ValueError(f"unknown dtype {cfg.dtype!r}: use one of {', '.join(DTYPES)}")
    if cfg.backend not in SERVE_BACKENDS:
        raise ValueError(f"unknown backend {cfg.backend!r}: use one of {', '.join(SERVE_BACKENDS)}")
    engine_dtype, autocast = DTYPES[cfg.dtype]
    path = resolve_model(cfg.model)
    if not Path(path).is_dir():
        raise ValueError(
            f"{cfg.model!r} resolved to {path!r}, not a local model directory: serving needs one"
        )
    base = LocalEngine.from_pretrained(path, device=cfg.device, dtype=engine_dtype)
    config = base.model.config
    served = ServedModel(
        name=cfg.model,
        path=path,
        arch=config.model_type,
        max_context=int(getattr(config, "max_position_embeddings", 2048)),
        linear_kinds=linear_kinds(base.model),
    )
    settings = TrainSettings(
        model_path=path,
        device=str(base.device),
        autocast=autocast,
        micro_batch_size=cfg.micro_batch_size,
        pad_id=base.pad_id,
        vocab_size=int(config.vocab_size),
        backend=cfg.backend,
        world_size=cfg.world_size,
    )
    state_dir = Path(cfg.state_dir).expanduser().resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    return TinkerService(served, settings, base, state_dir, max_samplers=cfg.max_samplers)


class ServerThread:
    """The service on a uvicorn server in a background thread (tests, notebooks, an in-process client).

    ``with ServerThread(service, port=0) as server: ... server.base_url`` — port 0 picks a free port."""

    def __init__(
        self, service: TinkerService, *, host: str = "127.0.0.1", port: int = 0, api_key: str | None = None
    ) -> None:
        if port == 0:
            with socket.socket() as s:
                s.bind((host, 0))
                port = s.getsockname()[1]
        self.base_url = f"http://{host}:{port}"
        config = uvicorn.Config(
            create_app(service, api_key=api_key), host=host, port=port, log_level="warning"
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="tinker-serve", daemon=True)

    def start(self, timeout_s: float = 30.0) -> Self:
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the Tinker service did not start at {self.base_url}")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(cfg: ServeConfig) -> None:
    """Run the service in the foreground until interrupted."""
    service = build_service(cfg)
    logger.info(
        "rllm serve tinker: %s at http://%s:%d (TINKER_BASE_URL); state in %s; %s",
        cfg.model,
        cfg.host,
        cfg.port,
        service.state_dir,
        "API key required" if cfg.api_key else "any API key accepted",
    )
    uvicorn.run(create_app(service, api_key=cfg.api_key), host=cfg.host, port=cfg.port, log_level="warning")
