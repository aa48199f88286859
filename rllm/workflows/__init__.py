"""Ready-made workflows, each ``workflow(task, ctx) -> Outcome``: single-turn (ask, score), multi-turn in
an environment, a tool-calling agent, solver-judge. ``score`` runs a reward function as a workflow's
verdict (``RewardError`` when it raises)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rllm._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "RewardError": "rllm.workflows.single_turn",
    "SingleTurnWorkflow": "rllm.workflows.single_turn",
    "question_messages": "rllm.workflows.single_turn",
    "score": "rllm.workflows.single_turn",
    "MultiTurnWorkflow": "rllm.workflows.multi_turn",
    "ToolAgentWorkflow": "rllm.workflows.tool_agent",
    "SolverJudgeWorkflow": "rllm.workflows.solver_judge",
}

__all__ = [
    "MultiTurnWorkflow",
    "RewardError",
    "SingleTurnWorkflow",
    "SolverJudgeWorkflow",
    "ToolAgentWorkflow",
    "question_messages",
    "score",
]

if TYPE_CHECKING:
    from rllm.workflows.multi_turn import MultiTurnWorkflow
    from rllm.workflows.single_turn import RewardError, SingleTurnWorkflow, question_messages, score
    from rllm.workflows.solver_judge import SolverJudgeWorkflow
    from rllm.workflows.tool_agent import ToolAgentWorkflow

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
