"""rllm: train LLM agents with reinforcement learning.

The public surface is importable from the top level (``rllm.AgentTrainer``, ``rllm.TrainConfig``,
``rllm.Episode`` ...). Each name is imported on first use (PEP 562), so ``import rllm`` stays fast and
does not load torch until something that needs it is touched.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rllm._lazy import lazy_exports
from rllm._version import __version__

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "AgentTrainer": "rllm.trainer.agent_trainer",
    "TrainResult": "rllm.trainer.agent_trainer",
    "TrainConfig": "rllm.trainer.config",
    "Episode": "rllm.types",
    "Trajectory": "rllm.types",
    "Step": "rllm.types",
    "TrainBatch": "rllm.types",
    "SamplingParams": "rllm.inference.base",
    "Outcome": "rllm.types",
    "TerminationReason": "rllm.types",
    "RolloutContext": "rllm.runner.context",
    "load_config": "rllm.utils.config",
    "rollout": "rllm.sdk.decorators",
    "evaluator": "rllm.sdk.decorators",
    "AgentConfig": "rllm.sdk.decorators",
    "Env": "rllm.envs.base",
    "EnvStep": "rllm.envs.base",
    "Agent": "rllm.agents.base",
    "InvalidAction": "rllm.agents.base",
    "Tool": "rllm.tools.tool",
    "tool": "rllm.tools.tool",
    "ToolRegistry": "rllm.tools.tool",
    "SingleTurnWorkflow": "rllm.workflows.single_turn",
    "MultiTurnWorkflow": "rllm.workflows.multi_turn",
    "ToolAgentWorkflow": "rllm.workflows.tool_agent",
    "SolverJudgeWorkflow": "rllm.workflows.solver_judge",
}

__all__ = [
    "Agent",
    "AgentConfig",
    "AgentTrainer",
    "Env",
    "EnvStep",
    "Episode",
    "InvalidAction",
    "MultiTurnWorkflow",
    "Outcome",
    "RolloutContext",
    "SamplingParams",
    "SingleTurnWorkflow",
    "SolverJudgeWorkflow",
    "Step",
    "TerminationReason",
    "Tool",
    "ToolAgentWorkflow",
    "ToolRegistry",
    "TrainBatch",
    "TrainConfig",
    "TrainResult",
    "Trajectory",
    "__version__",
    "evaluator",
    "load_config",
    "rollout",
    "tool",
]

if TYPE_CHECKING:
    from rllm.agents.base import Agent, InvalidAction
    from rllm.envs.base import Env, EnvStep
    from rllm.inference.base import SamplingParams
    from rllm.runner.context import RolloutContext
    from rllm.sdk.decorators import AgentConfig, evaluator, rollout
    from rllm.tools.tool import Tool, ToolRegistry, tool
    from rllm.trainer.agent_trainer import AgentTrainer, TrainResult
    from rllm.trainer.config import TrainConfig
    from rllm.types import Episode, Outcome, Step, TerminationReason, TrainBatch, Trajectory
    from rllm.utils.config import load_config
    from rllm.workflows.multi_turn import MultiTurnWorkflow
    from rllm.workflows.single_turn import SingleTurnWorkflow
    from rllm.workflows.solver_judge import SolverJudgeWorkflow
    from rllm.workflows.tool_agent import ToolAgentWorkflow


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
