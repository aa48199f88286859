"""The workflows ``rllm train`` can run by name (``workflow.name``), built from the config."""

from __future__ import annotations

from typing import Any

from rllm.trainer.config import TrainConfig

TOOL_SYSTEM_PROMPT = (
    "You are a careful math assistant. Do not compute in your head: call the calculator tool with the "
    "expression, then reply with only the final number."
)


def calculator_examples() -> list[dict[str, Any]]:
    """Two worked calculator examples: a small model copies their shape (call the tool, then answer).

    Two, not one: with one, SmolLM2-135M never calls the tool (0 of 48 held-out questions, 0 of 128
    sampled episodes), which leaves RL nothing to reinforce."""
    from rllm.workflows.tool_agent import worked_example

    return [
        *worked_example(
            "What is 12 * 34?", "calculator", {"expression": "12 * 34"}, "408", "408", "call_ex1"
        ),
        *worked_example(
            "Multiply 507 by 86.", "calculator", {"expression": "507 * 86"}, "43602", "43602", "call_ex2"
        ),
    ]


def dataset_reward_name(cfg: TrainConfig) -> str | None:
    """The reward that scores ``data.task``: ``data.reward``, else the dataset's own (None: an environment
    dataset such as frozenlake, whose workflow scores itself)."""
    from rllm.data.registry import DatasetRegistry

    return cfg.data.reward or DatasetRegistry().info(cfg.data.task).reward


def build_workflow(cfg: TrainConfig) -> Any:
    """The workflow ``cfg.workflow`` names, configured from ``cfg``: scored by the dataset's reward, with
    the answer instruction of that reward after each question (``data.instruction``)."""
    from rllm.rewards.instructions import answer_instruction
    from rllm.rewards.registry import get_reward

    w = cfg.workflow
    reward_name = None if w.name == "frozenlake" else dataset_reward_name(cfg)
    reward_fn = get_reward(reward_name) if reward_name else None
    instruction = (
        answer_instruction(reward_name) if cfg.data.instruction == "auto" else cfg.data.instruction or None
    )
    scoring: dict[str, Any] = {"reward_fn": reward_fn, "instruction": instruction} if reward_fn else {}
    if w.name == "single_turn":
        from rllm.workflows.single_turn import SingleTurnWorkflow

        return SingleTurnWorkflow(system_prompt=cfg.data.system_prompt, **scoring)
    if w.name == "tool_agent":
        from rllm.tools.builtin import calculator, make_python_tool
        from rllm.tools.tool import ToolRegistry
        from rllm.workflows.tool_agent import ToolAgentWorkflow

        makers = {
            "calculator": lambda: calculator,
            "python": lambda: make_python_tool(timeout_s=w.tool_timeout_s),
        }
        registry = ToolRegistry([makers[name]() for name in w.tools], default_timeout_s=w.tool_timeout_s)
        examples = calculator_examples() if "calculator" in w.tools else []
        return ToolAgentWorkflow(
            registry,
            system_prompt=cfg.data.system_prompt or TOOL_SYSTEM_PROMPT,
            examples=examples,
            max_turns=w.max_turns,
            **scoring,
        )
    if w.name == "solver_judge":
        from rllm.workflows.solver_judge import SolverJudgeWorkflow

        return SolverJudgeWorkflow(
            n_solvers=w.n_solvers, solver_system_prompt=cfg.data.system_prompt, **scoring
        )
    if w.name == "frozenlake":
        from rllm.envs.frozenlake import FrozenLakeAgent, FrozenLakeEnv
        from rllm.workflows.multi_turn import MultiTurnWorkflow

        def agent() -> FrozenLakeAgent:
            return FrozenLakeAgent(history_turns=w.history_turns)

        return MultiTurnWorkflow(
            FrozenLakeEnv, agent, max_turns=w.max_turns, invalid_action_reward=w.invalid_action_reward
        )
    raise ValueError(f"unknown workflow {w.name!r}")  # unreachable: the config's Literal refuses it first
