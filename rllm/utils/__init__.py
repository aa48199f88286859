"""Shared plumbing: typed configs from YAML and ``key=value`` overrides (``load_config``), and the
metrics logger with its sinks (console, JSONL, TensorBoard, W&B)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rllm._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "ConfigError": "rllm.utils.config",
    "config_keys": "rllm.utils.config",
    "describe_config": "rllm.utils.config",
    "dump_config": "rllm.utils.config",
    "load_config": "rllm.utils.config",
    "MetricsLogger": "rllm.utils.metrics",
    "MetricsSink": "rllm.utils.metrics",
}

__all__ = [
    "ConfigError",
    "MetricsLogger",
    "MetricsSink",
    "config_keys",
    "describe_config",
    "dump_config",
    "load_config",
]

if TYPE_CHECKING:
    from rllm.utils.config import ConfigError, config_keys, describe_config, dump_config, load_config
    from rllm.utils.metrics import MetricsLogger, MetricsSink

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
