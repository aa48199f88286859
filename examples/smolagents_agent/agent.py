"""An ordinary smolagents ToolCallingAgent with a calculator tool: `OpenAIServerModel`, no rllm import.

This is the code a smolagents user already has, written as smolagents' docs show it: a `@tool` function
with a docstring that describes its arguments, an `OpenAIServerModel` pointed at an OpenAI-compatible
server, and a `ToolCallingAgent` that loops model → tool → model until the model calls `final_answer`
(or `max_steps` runs out). `train.py` trains the model behind it without changing a line: it only
builds the agent with an `api_base` that is an rllm gateway session.

ToolCallingAgent asks for `tool_choice="required"` on every model call, so every step is a tool call.
Its default system prompt is ~1,500 tokens of examples for notional tools; `prompt_templates` (the
documented way to customise the prompts) replaces it with a short one for this task, so a 135M model on
a CPU sees a prompt it can use.
"""

from __future__ import annotations

import ast
import importlib.resources
import math
import operator
from collections.abc import Callable
from typing import Any

import yaml
from smolagents import OpenAIServerModel, ToolCallingAgent, tool

SYSTEM_PROMPT = """You are a careful math assistant who solves tasks with tool calls.
Do not compute products in your head: first call calculate with the expression, then call final_answer
with the number the calculator returned. For example:

Task: What is 12 * 34?
<tool_call>
{"name": "calculate", "arguments": {"expression": "12 * 34"}}
</tool_call>
Observation: 408
<tool_call>
{"name": "final_answer", "arguments": {"answer": "408"}}
</tool_call>

Your tools:
{%- for tool in tools.values() %}
- {{ tool.name }}: {{ tool.description }}
{%- endfor %}"""

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
    """Evaluate an arithmetic expression with + - * / and parentheses.

    Args:
        expression: The expression to evaluate, e.g. "(12 + 3) * 4".
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
    api_base: str, api_key: str, model_id: str, *, max_steps: int = 2, **model_kwargs: Any
) -> ToolCallingAgent:
    """A ToolCallingAgent over an OpenAI-compatible server; `model_kwargs` go to every completion call
    (e.g. `max_tokens`, `temperature`)."""
    model = OpenAIServerModel(model_id=model_id, api_base=api_base, api_key=api_key, **model_kwargs)
    prompt_templates = yaml.safe_load(
        importlib.resources.files("smolagents.prompts").joinpath("toolcalling_agent.yaml").read_text()
    )
    prompt_templates["system_prompt"] = SYSTEM_PROMPT
    return ToolCallingAgent(
        tools=[calculate],
        model=model,
        max_steps=max_steps,
        prompt_templates=prompt_templates,
        verbosity_level=0,
    )


def solve(agent: ToolCallingAgent, question: str) -> str:
    """Run the agent on one question; its final answer as text ("" if it gave none)."""
    answer = agent.run(question)
    return "" if answer is None else str(answer).strip()
