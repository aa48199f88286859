"""The workflow ``rllm train`` runs, built from the config: the workflow ``workflow.name`` names in
``WORKFLOWS`` (the builders of the built-in ones are below), or the multi-turn game against the environment
of that name (``rllm.envs.registry``)."""

from __future__ import annotations

from typing import Any

from rllm.data.registry import DatasetRegistry
from rllm.envs.registry import get_env, is_env
from rllm.rewards.instructions import answer_instruction
from rllm.rewards.registry import get_reward
from rllm.tools.named import make_named_tool
from rllm.tools.tool import ToolRegistry
from rllm.trainer.config import WORKFLOWS, TrainConfig
from rllm.workflows.builtin import TOOL_SYSTEM_PROMPT, calculator_examples
from rllm.workflows.coordinator import CoordinatorWorkflow
from rllm.workflows.multi_turn import MultiTurnWorkflow
from rllm.workflows.single_turn import SingleTurnWorkflow
from rllm.workflows.solver_judge import SolverJudgeWorkflow
from rllm.workflows.tool_agent import ToolAgentWorkflow


def dataset_reward_name(cfg: TrainConfig) -> str | None:
    """The reward that scores ``data.task``: ``data.reward``, else the dataset's own (None: an environment's
    task family, whose environment scores itself)."""
    return cfg.data.reward or DatasetRegistry().info(cfg.data.task).reward


def build_env_workflow(cfg: TrainConfig) -> Any:
    """The multi-turn workflow against the environment ``workflow.name``, with its options from the
    ``workflow`` section: the environment scores each episode itself."""
    spec = get_env(cfg.workflow.name)
    options = spec.options.model_validate(cfg.workflow.model_dump(exclude={"name"}))

    def env(task: dict[str, Any]) -> Any:
        return spec.env(task, options)

    def agent() -> Any:
        return spec.agent(options)

    return MultiTurnWorkflow(
        env, agent, max_turns=options.max_turns, invalid_action_reward=options.invalid_action_reward
    )


def _called_tools(messages: list[dict[str, Any]]) -> set[str]:
    """The names of the tools the assistant messages of ``messages`` call."""
    return {call["function"]["name"] for m in messages for call in m.get("tool_calls") or ()}


def build_workflow(cfg: TrainConfig) -> Any:
    """The workflow ``cfg.workflow`` names, configured from ``cfg``: scored by the dataset's reward, with
    the answer instruction of that reward after each question (``data.instruction``)."""
    if is_env(cfg.workflow.name):
        return build_env_workflow(cfg)
    reward_name = dataset_reward_name(cfg)
    reward_fn = get_reward(reward_name) if reward_name else None
    instruction = (
        answer_instruction(reward_name) if cfg.data.instruction == "auto" else cfg.data.instruction or None
    )
    scoring: dict[str, Any] = {"reward_fn": reward_fn, "instruction": instruction} if reward_fn else {}
    return WORKFLOWS.get(cfg.workflow.name)(cfg, scoring)


def build_single_turn(cfg: TrainConfig, scoring: dict[str, Any]) -> SingleTurnWorkflow:
    return SingleTurnWorkflow(system_prompt=cfg.data.system_prompt, **scoring)


def build_tool_agent(cfg: TrainConfig, scoring: dict[str, Any]) -> ToolAgentWorkflow:
    """The ReAct loop over the tools ``workflow.tools`` names, with the dataset's own prompt and worked
    examples when it has them (finance: table_lookup, then the calculator), else the calculator's."""
    w = cfg.workflow
    tools = [make_named_tool(name, timeout_s=w.tool_timeout_s) for name in w.tools]
    registry = ToolRegistry(tools, default_timeout_s=w.tool_timeout_s)
    info = DatasetRegistry().info(cfg.data.task)
    examples = list(info.examples) or (calculator_examples() if "calculator" in w.tools else [])
    missing = sorted(_called_tools(examples) - set(w.tools))
    if missing:
        raise ValueError(
            f"the worked examples of data.task={cfg.data.task} call {', '.join(missing)}: add "
            f"{'it' if len(missing) == 1 else 'them'} to workflow.tools (it has {w.tools})"
        )
    return ToolAgentWorkflow(
        registry,
        system_prompt=cfg.data.system_prompt or info.system_prompt or TOOL_SYSTEM_PROMPT,
        examples=examples,
        max_turns=w.max_turns,
        **scoring,
    )


def build_solver_judge(cfg: TrainConfig, scoring: dict[str, Any]) -> SolverJudgeWorkflow:
    return SolverJudgeWorkflow(
        n_solvers=cfg.workflow.n_solvers, solver_system_prompt=cfg.data.system_prompt, **scoring
    )


def build_coordinator(cfg: TrainConfig, scoring: dict[str, Any]) -> CoordinatorWorkflow:
    """The coordinator over ``workflow.workers``; the final answer graded by the dataset's reward."""
    w = cfg.workflow
    return CoordinatorWorkflow(
        w.workers,
        exploration=w.exploration,
        worker_reward=w.worker_reward,
        coordinator_reward=w.coordinator_reward,
        constrain_final=w.constrain_final,
        seed=cfg.trainer.seed,
        **scoring,
    )
