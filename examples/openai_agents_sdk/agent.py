"""An ordinary OpenAI Agents SDK agent with a calculator tool: `Agent`, a `@function_tool`, `Runner.run`,
and the SDK's default model class (`OpenAIResponsesModel`, the Responses API). No rllm import.

This is the code a researcher already has. `train.py` trains the model behind it without changing a line:
it only builds the agent on an `AsyncOpenAI` client whose base URL is an rllm gateway session.

The SDK's loop: the model answers or calls `calculate`; the tool result goes back to the model (the SDK
re-sends the whole conversation each turn); `max_turns` bounds the model turns.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

from agents import (
    Agent,
    MaxTurnsExceeded,
    ModelBehaviorError,
    ModelSettings,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

set_tracing_disabled(True)  # no trace export to OpenAI's platform: this runs offline

INSTRUCTIONS = (
    "You are a careful math assistant. Do not compute products in your head: call the calculate tool "
    "with the expression, then reply with only the final number."
)


def _worked_example(question: str, expression: str, result: str, call_id: str) -> list[dict[str, Any]]:
    """One solved question as Responses input items: the question, the tool call, its result, the answer."""
    return [
        {"role": "user", "content": question},
        {
            "type": "function_call",
            "call_id": call_id,
            "name": "calculate",
            "arguments": f'{{"expression": "{expression}"}}',
        },
        {"type": "function_call_output", "call_id": call_id, "output": result},
        {"role": "assistant", "content": result},
    ]


# Two worked examples before the question: a small model copies their shape (call the tool, then answer
# with its result). Being structured items, they are rendered in whatever tool-call format the server uses.
EXAMPLE_ITEMS: list[dict[str, Any]] = [
    *_worked_example("What is 12 * 34?", "12 * 34", "408", "call_example_1"),
    *_worked_example("Multiply 507 by 86.", "507 * 86", "43602", "call_example_2"),
]

_OPERATORS: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}
_MAX_EXPRESSION_CHARS = 200


def _evaluate(node: ast.expr) -> float:
    """The value of an arithmetic syntax tree made only of numbers, + - * /, unary signs and parentheses."""
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        value = _evaluate(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    raise ValueError(f"only numbers, + - * / and parentheses are allowed, not {ast.unparse(node)!r}")


def _format_number(value: float) -> str:
    if isinstance(value, int) or (math.isfinite(value) and value.is_integer() and abs(value) < 1e15):
        return str(int(value))
    return f"{value:.6g}"


@function_tool
def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression with + - * / and parentheses, e.g. "(12 + 3) * 4".

    Args:
        expression: the arithmetic expression to evaluate.
    """
    # Errors are returned as text, not raised: the model reads them and may try again.
    if len(expression) > _MAX_EXPRESSION_CHARS:
        return f"error: the expression is longer than {_MAX_EXPRESSION_CHARS} characters"
    try:
        return _format_number(_evaluate(ast.parse(expression.strip(), mode="eval").body))
    except ZeroDivisionError:
        return "error: division by zero"
    except (SyntaxError, ValueError, TypeError) as exc:
        return f"error: {exc}"


def make_client(base_url: str, api_key: str) -> AsyncOpenAI:
    """The OpenAI client the agent talks through (any OpenAI-compatible server with the Responses API).

    A model on a shared CPU can take minutes per call when a whole batch of episodes waits on it, hence the
    long timeout; no retries, since a retried call would be sampled (and recorded) twice."""
    return AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=1800)


def build_agent(client: AsyncOpenAI, model: str, *, max_tokens: int = 96, temperature: float = 0.7) -> Agent:
    """The calculator agent on the SDK's default Responses model, served through `client`."""
    return Agent(
        name="calculator",
        instructions=INSTRUCTIONS,
        tools=[calculate],
        model=OpenAIResponsesModel(model=model, openai_client=client),
        model_settings=ModelSettings(temperature=temperature, max_tokens=max_tokens),
    )


async def solve(agent: Agent, question: str, *, max_turns: int = 3) -> str:
    """Run the agent on one question and return its final answer text.

    A model that keeps calling tools past `max_turns`, calls a tool the agent does not have, or runs out
    of tokens mid-answer gets no answer ("") instead of an exception: the episode is graded, not lost.
    """
    try:
        result = await Runner.run(
            agent, [*EXAMPLE_ITEMS, {"role": "user", "content": question}], max_turns=max_turns
        )
    except (MaxTurnsExceeded, ModelBehaviorError):
        return ""
    return str(result.final_output or "").strip()
