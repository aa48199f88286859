"""An ordinary LangGraph ReAct agent with a calculator tool: LangChain's `ChatOpenAI`, no rllm import.

This is the code a researcher already has. `train.py` trains the model behind it without changing a line:
it only builds the agent with a base URL that is an rllm gateway session.

The graph is the ReAct loop from LangGraph's docs, written out (`StateGraph` + `ToolNode`) rather than
taken from `langgraph.prebuilt.create_react_agent`, which LangGraph 1.x deprecates in favour of
`langchain.agents.create_agent` (another package). The loop is: the model answers or calls `calculate`;
tool results go back to the model; after `max_model_calls` model turns the graph stops, whatever the
model asked for, so a model that keeps calling tools cannot run forever.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode

SYSTEM_PROMPT = (
    "You are a careful math assistant. Do not compute products in your head: call the calculate tool "
    "with the expression, then reply with only the final number."
)


def _worked_example(question: str, expression: str, result: str, call_id: str) -> list[BaseMessage]:
    return [
        HumanMessage(question),
        AIMessage("", tool_calls=[{"name": "calculate", "args": {"expression": expression}, "id": call_id}]),
        ToolMessage(result, tool_call_id=call_id),
        AIMessage(result),
    ]


# Two worked examples, as chat messages, before the question: a small model copies their shape (call the
# tool, then answer with its result). Being structured messages, they are rendered in whatever
# tool-call format the server uses.
EXAMPLE_TURNS: list[BaseMessage] = [
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
    """Evaluate an arithmetic expression with + - * / and parentheses, e.g. "(12 + 3) * 4"."""
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
    base_url: str,
    api_key: str,
    model: str,
    *,
    max_tokens: int = 96,
    max_model_calls: int = 3,
    http_async_client: Any | None = None,
) -> CompiledStateGraph:
    """The ReAct graph: `model` → (`tools` → `model`)* → end, at most `max_model_calls` model turns.

    `http_async_client` is passed to `ChatOpenAI` (by default LangChain keeps one client per base URL).
    """
    llm = ChatOpenAI(
        base_url=base_url,
        api_key=api_key,
        model=model,
        max_tokens=max_tokens,
        temperature=0.7,
        max_retries=1,
        timeout=300,
        http_async_client=http_async_client,
    )
    llm_with_tools = llm.bind_tools([calculate])

    async def call_model(state: MessagesState) -> dict[str, list[BaseMessage]]:
        prompt = [SystemMessage(SYSTEM_PROMPT), *EXAMPLE_TURNS, *state["messages"]]
        reply = await llm_with_tools.ainvoke(prompt)
        return {"messages": [reply]}

    def route(state: MessagesState) -> str:
        messages = state["messages"]
        model_calls = sum(isinstance(m, AIMessage) for m in messages)
        wants_tools = isinstance(messages[-1], AIMessage) and bool(messages[-1].tool_calls)
        return "tools" if wants_tools and model_calls < max_model_calls else END

    graph = StateGraph(MessagesState)
    graph.add_node("model", call_model)
    graph.add_node("tools", ToolNode([calculate]))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", route, ["tools", END])
    graph.add_edge("tools", "model")
    return graph.compile()


def final_answer(messages: list[BaseMessage]) -> str:
    """The text of the model's last turn ("" if it ended asking for a tool it was not given any more)."""
    last = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
    if last is None:
        return ""
    content: Any = last.content
    if isinstance(content, list):  # content blocks
        content = "".join(b if isinstance(b, str) else str(b.get("text", "")) for b in content)
    return str(content).strip()


async def solve(agent: CompiledStateGraph, question: str, *, recursion_limit: int = 10) -> str:
    """Run the agent on one question and return its final answer text.

    `recursion_limit` bounds the graph's steps (each model or tool node is one); the routing already
    stops after `max_model_calls` model turns, so this is only a backstop.
    """
    state = await agent.ainvoke(
        {"messages": [HumanMessage(question)]}, config={"recursion_limit": recursion_limit}
    )
    return final_answer(state["messages"])
