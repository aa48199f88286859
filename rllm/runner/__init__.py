"""The workflow runner: runs many episodes of a workflow at once (timeouts, retries) and turns each into
an ``Episode``; a workflow calls the model through its ``RolloutContext``. ``assembly`` turns gateway
traces into token-faithful Steps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rllm._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "RolloutContext": "rllm.runner.context",
    "Workflow": "rllm.runner.workflow_runner",
    "WorkflowRunner": "rllm.runner.workflow_runner",
    "task_id_of": "rllm.runner.workflow_runner",
    "assemble_steps": "rllm.runner.assembly",
    "traces_to_trajectories": "rllm.runner.assembly",
}

__all__ = [
    "RolloutContext",
    "Workflow",
    "WorkflowRunner",
    "assemble_steps",
    "task_id_of",
    "traces_to_trajectories",
]

if TYPE_CHECKING:
    from rllm.runner.assembly import assemble_steps, traces_to_trajectories
    from rllm.runner.context import RolloutContext
    from rllm.runner.workflow_runner import Workflow, WorkflowRunner, task_id_of

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
