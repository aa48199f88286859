"""An ordinary Strands Agents agent with a calculator tool: an `Agent` with a system prompt, a `@tool`, and
Strands' OpenAI provider (`OpenAIModel`, chat completions) given a base URL. No rllm import.

This is the code a researcher already has. `train.py` trains the model behind it without changing a line:
it only builds the agent with a base URL that is an rllm gateway session.

Strands' loop: the model answers or calls `calculate`; the tool result goes back to the model (Strands
re-sends the whole conversation each turn); `limits={"turns": ...}` bounds the model turns.
"""

from __future__ import annotations

import ast
import copy
import math
import operator
from collections.abc import Callable
from typing import Any

from strands import Agent, tool
from strands.models.openai import OpenAIModel
from strands.types.exceptions import MaxTokensReachedException

SYSTEM_PROMPT = (
    "You are a careful math assistant. Do not compute products in your head: call the calculate tool "
    "with the expression, then reply with only the final number."
)


def _worked_example(question: str, expression: str, result: str, call_id: str) -> list[dict[str, Any]]:
    """One solved question as Strands messages: the question, the tool call, its result, the answer."""
    return [
        {"role": "user", "content": [{"text": question}]},
        {
            "role": "assistant",
            "content": [
                {"toolUse": {"toolUseId": call_id, "name": "calculate", "input": {"expression": expression}}}
            ],
        },
        {
            "role": "user",
            "content": [
                {"toolResult": {"toolUseId": call_id, "status": "success", "content": [{"text": result}]}}
            ],
        },
        {"role": "assistant", "content": [{"text": result}]},
    ]


# Two worked examples as the conversation so far: a small model copies their shape (call the tool, then
# answer with its result). Being structured messages, they are rendered in whatever tool-call format the
# server uses.
EXAMPLE_MESSAGES: list[dict[str, Any]] = [
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


@tool
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


def build_agent(
    base_url: str, api_key: str, model: str, *, max_tokens: int = 96, temperature: float = 0.7
) -> Agent:
    """The calculator agent on Strands' OpenAI provider, served by the OpenAI-compatible server at `base_url`.

    The client never retries (a retried call would be sampled, and recorded, twice) and waits up to 30 min
    for a reply: a model on a shared CPU can take many minutes per call when a whole batch of episodes
    waits on it, past the `openai` client's default 10 min. Strands' own retries (`retry_strategy`) are
    for throttling (HTTP 429), which this server never answers; they are off for the same reason.
    """
    openai_model = OpenAIModel(
        client_args={"base_url": base_url, "api_key": api_key, "max_retries": 0, "timeout": 1800},
        model_id=model,
        params={"max_tokens": max_tokens, "temperature": temperature},
    )
    return Agent(
        model=openai_model,
        system_prompt=SYSTEM_PROMPT,
        tools=[calculate],
        messages=copy.deepcopy(EXAMPLE_MESSAGES),  # the agent appends to its messages: a copy per agent
        callback_handler=None,  # no printing of the streamed text
        retry_strategy=None,
    )


async def solve(agent: Agent, question: str, *, max_turns: int = 3) -> str:
    """Run the agent on one question and return its final answer text.

    A model that keeps calling tools past `max_turns` (Strands stops with `stop_reason` "limit_turns") or
    runs out of tokens mid-answer gets no answer ("") instead of an exception: the episode is graded, not
    lost. A call to a tool the agent lacks is answered by Strands with an error result the model can read.
    """
    try:
        result = await agent.invoke_async(question, limits={"turns": max_turns})
    except MaxTokensReachedException:
        return ""
    if result.stop_reason != "end_turn":
        return ""
    return str(result).strip()
