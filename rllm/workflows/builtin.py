"""What the built-in tool-agent workflow starts from: its system prompt and worked examples (the trainer
builds the workflows from the config: ``rllm.trainer.workflows``)."""

from __future__ import annotations

from typing import Any

from rllm.workflows.tool_agent import worked_example

TOOL_SYSTEM_PROMPT = (
    "You are a careful math assistant. Do not compute in your head: call the calculator tool with the "
    "expression, then reply with only the final number."
)


def calculator_examples() -> list[dict[str, Any]]:
    """Two worked calculator examples: a small model copies their shape (call the tool, then answer).

    Two, not one: with one, SmolLM2-135M never calls the tool (0 of 48 held-out questions, 0 of 128
    sampled episodes), which leaves RL nothing to reinforce."""
    return [
        *worked_example(
            "What is 12 * 34?", "calculator", {"expression": "12 * 34"}, "408", "408", "call_ex1"
        ),
        *worked_example(
            "Multiply 507 by 86.", "calculator", {"expression": "507 * 86"}, "43602", "43602", "call_ex2"
        ),
    ]
