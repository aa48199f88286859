"""Rollout engines, by the name ``inference.engine`` gives them. The loop asks this factory, never a class.

- ``local``: :class:`~rllm.inference.local.LocalEngine`, batched sampling in this process; weights arrive as
  tensors after every optimizer step.
- ``vllm``: :class:`~rllm.trainer.vllm_pool.VLLMPoolEngine`, a pool of vLLM OpenAI servers (started here,
  or attached by URL) behind the gateway; every call, from built-in workflows and ``@rllm.rollout`` agents
  alike, goes through the gateway and is traced; weights arrive as files (a LoRA adapter hot-loaded into
  every server, or a full model).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rllm.trainer.backends.base import UnsupportedConfigError
from rllm.trainer.config import TrainConfig

ENGINES = ("local", "vllm")


def build_engine(cfg: TrainConfig, model_path: str, *, run_dir: Path) -> Any:
    """The rollout engine ``cfg.inference.engine`` names, ready to sample from ``model_path``."""
    name = cfg.inference.engine
    if name == "local":
        from rllm.inference.local import LocalEngine, pick_device  # transformers: only this engine needs it

        return LocalEngine.from_pretrained(
            model_path,
            device=str(pick_device(cfg.backend.device)),
            dtype=cfg.inference.dtype,
            max_batch_rows=cfg.inference.max_batch_rows,
            seed=cfg.trainer.seed,
        )
    if name == "vllm":
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
    raise ValueError(f"inference.engine={name!r} is not an engine: choose one of {', '.join(ENGINES)}")
