"""Where and in which precision a model runs: the device and dtype names config accepts."""

from __future__ import annotations

import torch


def pick_device(device: str = "auto") -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def pick_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """``auto`` is bf16 where the hardware runs it natively (CUDA with bf16, CPUs with AVX512-BF16/AMX),
    else float32."""
    if dtype == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.bfloat16 if torch.ops.mkldnn._is_mkldnn_bf16_supported() else torch.float32
    try:
        return {
            "bfloat16": torch.bfloat16,
            "bf16": torch.bfloat16,
            "float16": torch.float16,
            "fp16": torch.float16,
            "float32": torch.float32,
            "fp32": torch.float32,
        }[dtype]
    except KeyError:
        raise ValueError(f"unknown dtype {dtype!r}: use auto, bfloat16, float16 or float32") from None
