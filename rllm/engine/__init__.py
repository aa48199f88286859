"""The workflow engine: runs many episodes of a workflow at once (timeouts, retries) and turns each into
an ``Episode``; a workflow calls the model through its ``RolloutContext``. ``assembly`` turns gateway
traces into token-faithful Steps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rllm._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "RolloutContext": "rllm.engine.context",
    "Workflow": "rllm.engine.workflow_engine",
    "WorkflowEngine": "rllm.engine.workflow_engine",
    "task_id_of": "rllm.engine.workflow_engine",
    "assemble_steps": "rllm.engine.assembly",
    "traces_to_trajectories": "rllm.engine.assembly",
}

__all__ = [
    "RolloutContext",
    "Workflow",
    "WorkflowEngine",
    "assemble_steps",
    "task_id_of",
    "traces_to_trajectories",
]

if TYPE_CHECKING:
    from rllm.engine.assembly import assemble_steps, traces_to_trajectories
    from rllm.engine.context import RolloutContext
    from rllm.engine.workflow_engine import Workflow, WorkflowEngine, task_id_of

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
