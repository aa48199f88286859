"""What ``rllm train`` reads from a project directory (``rllm init`` makes one; docs/init.md).

- ``./rllm.yaml``: the config ``rllm train`` loads when it is given no config file (``PROJECT_CONFIG``).
- ``workflow.name=flow`` with ``workflow.flow=module:attribute``: the project's own flow, imported from the
  directory rllm runs in, with ``workflow.evaluator`` for an ``@rllm.rollout`` flow (``load_flow``).
- ``data.train_file`` / ``data.test_file``: task files instead of ``data.task``'s splits (``config_tasks``).

The same config works from Python: ``AgentTrainer(config)`` does all three lookups itself.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from rllm.data.registry import DatasetRegistry
from rllm.data.schema import read_task_file
from rllm.sdk.decorators import Evaluator, Rollout
from rllm.trainer.config import FlowConfig, TrainConfig
from rllm.utils.imports import ObjectNotFoundError, load_object

__all__ = ["PROJECT_CONFIG", "FlowError", "config_tasks", "find_project_config", "load_flow"]

PROJECT_CONFIG = "rllm.yaml"


class FlowError(ObjectNotFoundError):
    """``workflow.flow`` or ``workflow.evaluator`` names something that cannot be run as one."""


def find_project_config(directory: str | Path = ".") -> Path | None:
    """``directory/rllm.yaml`` when it exists (the config of a project ``rllm train`` runs in), else None."""
    path = Path(directory) / PROJECT_CONFIG
    return path if path.is_file() else None


def load_flow(cfg: TrainConfig) -> tuple[Any, Any | None]:
    """The (flow, evaluator) that ``workflow.flow`` / ``workflow.evaluator`` name.

    A flow is an ``@rllm.rollout`` agent (it talks to the model over HTTP through the trainer's gateway),
    a workflow object with ``async __call__(task, ctx)``, or an ``async def flow(task, ctx)`` function; the
    evaluator, an ``@rllm.evaluator``, goes with a rollout only (the other two score their own episodes).
    """
    w = cfg.workflow
    if not isinstance(w, FlowConfig):
        raise TypeError(f"load_flow needs workflow.name=flow, not {w.name!r}")
    flow = load_object(w.flow, what="workflow.flow")
    evaluator = load_object(w.evaluator, what="workflow.evaluator") if w.evaluator else None
    if isinstance(flow, type) or not callable(flow):
        raise FlowError(
            f"workflow.flow {w.flow!r} is a {type(flow).__name__}, not a flow: name an @rllm.rollout "
            "function, an async function (task, ctx), or a workflow instance"
        )
    is_async = inspect.iscoroutinefunction(flow) or inspect.iscoroutinefunction(type(flow).__call__)
    if not isinstance(flow, Rollout) and not is_async:
        raise FlowError(
            f"workflow.flow {w.flow!r} is a plain function: decorate it with @rllm.rollout (it gets "
            "(task, config) and calls the model over HTTP) or make it `async def (task, ctx)`"
        )
    if evaluator is not None and not isinstance(flow, Rollout):
        raise FlowError(
            f"workflow.evaluator goes with an @rllm.rollout flow; {w.flow!r} scores its own episodes "
            "(return an rllm.Outcome from it): drop workflow.evaluator"
        )
    if evaluator is not None and not isinstance(evaluator, Evaluator):
        raise FlowError(f"workflow.evaluator {w.evaluator!r} is not decorated with @rllm.evaluator")
    return flow, evaluator


def build_flow(cfg: TrainConfig, scoring: dict[str, Any]) -> Any:
    """The builder of ``workflow.name=flow`` in ``WORKFLOWS``: the flow, which scores itself (``scoring`` is
    unused). ``AgentTrainer`` calls :func:`load_flow` itself, for the evaluator that goes with the flow."""
    flow, _evaluator = load_flow(cfg)
    return flow


def config_tasks(cfg: TrainConfig, split: str) -> list[dict[str, Any]]:
    """The tasks of ``split`` ("train" or "test"): ``data.<split>_file`` when set, else ``data.task``'s
    ``data.<split>_split``, at most ``data.<split>_size`` of them. Blocking: reads files."""
    d = cfg.data
    path = d.train_file if split == "train" else d.test_file
    limit = d.train_size if split == "train" else d.test_size
    if path is not None:
        return read_task_file(path, name=Path(path).stem, split=split)[:limit]
    name = d.train_split if split == "train" else d.test_split
    return DatasetRegistry().load(d.task, name, limit=limit, seed=cfg.trainer.seed, reward=d.reward)
