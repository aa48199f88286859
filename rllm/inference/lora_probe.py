"""A zero LoRA adapter of a given rank, for asking a running vLLM server whether it can hold adapters
that large (:func:`check_max_lora_rank`).

It adapts one projection of the first decoder layer (``q_proj`` of Llama-, Qwen- and Mistral-style models,
found from ``config.json``) with all-zero matrices, so loading it changes nothing the server samples.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors.torch import save_file

from rllm.inference.vllm_server import (
    VLLMWeightsError,
    load_lora_adapter,
    max_lora_rank_for,
    unload_lora_adapter,
)

logger = logging.getLogger(__name__)
PROBE_NAME = "rllm-rank-probe"


def check_max_lora_rank(
    urls: Sequence[str], model_dir: str | Path, work_dir: str | Path, *, rank: int
) -> None:
    """Load a zero rank-``rank`` adapter into every server at ``urls`` and unload it again, so a server
    started with a smaller ``--max-lora-rank`` is refused now rather than at the first weight sync.
    Raises ``ValueError`` (one line) naming the server; a model layout the probe does not know is skipped
    with a warning."""
    probe = write_probe_adapter(model_dir, work_dir, rank=rank)
    if probe is None:
        logger.warning(
            "cannot build a LoRA probe for %s: the servers' --max-lora-rank is checked at the first "
            "weight sync",
            model_dir,
        )
        return
    try:
        for url in urls:
            try:
                load_lora_adapter(url, PROBE_NAME, probe)
            except VLLMWeightsError as exc:
                if "max_lora_rank" in str(exc):
                    raise ValueError(
                        f"vLLM server {url} was started with a --max-lora-rank below lora.rank={rank}: "
                        f"restart it with --max-lora-rank {max_lora_rank_for(rank)} (or more)"
                    ) from exc
                raise ValueError(f"vLLM server {url} cannot load a rank-{rank} adapter: {exc}") from exc
            unload_lora_adapter(url, PROBE_NAME)
    finally:
        shutil.rmtree(probe, ignore_errors=True)


def write_probe_adapter(model_dir: str | Path, out_dir: str | Path, *, rank: int) -> Path | None:
    """Write the probe adapter to ``out_dir``; None when the model's layout is not one this knows."""
    config_path = Path(model_dir) / "config.json"
    if not config_path.exists():
        return None
    config = json.loads(config_path.read_text())
    hidden, heads = config.get("hidden_size"), config.get("num_attention_heads")
    if not hidden or not heads or config.get("model_type") not in ("llama", "qwen2", "qwen3", "mistral"):
        return None
    head_dim = config.get("head_dim") or hidden // heads
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    prefix = "base_model.model.model.layers.0.self_attn.q_proj"
    save_file(
        {
            f"{prefix}.lora_A.weight": torch.zeros(rank, hidden),
            f"{prefix}.lora_B.weight": torch.zeros(heads * head_dim, rank),
        },
        str(out / "adapter_model.safetensors"),
    )
    (out / "adapter_config.json").write_text(
        json.dumps(
            {
                "peft_type": "LORA",
                "task_type": "CAUSAL_LM",
                "r": rank,
                "lora_alpha": rank,
                "lora_dropout": 0.0,
                "target_modules": ["q_proj"],
                "bias": "none",
                "base_model_name_or_path": str(model_dir),
                "fan_in_fan_out": False,
                "modules_to_save": None,
            }
        )
    )
    return out
