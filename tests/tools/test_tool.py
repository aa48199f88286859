"""Tool schemas from type hints and docstrings, and the registry that turns every failure into a result."""

from __future__ import annotations

import asyncio
import enum
import subprocess
import sys
import time
from typing import Any, Literal, Optional

import pytest
from pydantic import BaseModel

from rllm.tools import (
    TOOL_ERRORS,
    Tool,
    ToolArgumentsError,
    ToolCall,
    ToolRegistry,
    ToolResult,
    tool,
    tool_metrics,
)


class Unit(enum.Enum):
    CELSIUS = "celsius"
    FAHRENHEIT = "fahrenheit"


class Point(BaseModel):
    x: float
    y: float


def forecast(
    city: str,
    days: int,
    unit: Unit = Unit.CELSIUS,
    hours: list[int] | None = None,
    detail: Literal["short", "long"] = "short",
    precision: float = 0.5,
    include_wind: bool = False,
    title: Optional[str] = None,  # noqa: UP045 — Optional is part of what is tested
) -> dict[str, Any]:
    """Get the weather forecast for a city.

    The forecast comes from a made-up service.

    Args:
        city: Name of the city.
        days: How many days ahead.
        unit: Temperature unit.
        title: A heading for the report; a parameter named like a schema keyword.
    """
    return {"city": city, "days": days, "unit": unit, "hours": hours}


def _keys(node: Any) -> set[str]:
    """Every key of every dict in ``node``, except the names under "properties"."""
    if isinstance(node, list):
        return set().union(*map(_keys, node)) if node else set()
    if not isinstance(node, dict):
        return set()
    found = set()
    for key, value in node.items():
        if key == "properties":
            found |= set().union(*map(_keys, value.values())) if value else set()
        else:
            found |= {key} | _keys(value)
    return found


def _call(name: str, arguments: str = "{}", call_id: str = "call_1") -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=arguments)


# --- schemas ---------------------------------------------------------------------------------------


def test_schema_from_type_hints_and_google_docstring() -> None:
    schema = Tool.from_function(forecast).schema()
    assert schema["type"] == "function"
    function = schema["function"]
    assert function["name"] == "forecast"
    assert function["description"] == (
        "Get the weather forecast for a city.\n\nThe forecast comes from a made-up service."
    )
    parameters = function["parameters"]
    assert parameters["type"] == "object"
    assert parameters["required"] == ["city", "days"]
    assert parameters["additionalProperties"] is False
    props = parameters["properties"]
    assert props["city"] == {"type": "string", "description": "Name of the city."}
    assert props["days"] == {"type": "integer", "description": "How many days ahead."}
    assert props["unit"] == {
        "type": "string",
        "enum": ["celsius", "fahrenheit"],
        "default": "celsius",
        "description": "Temperature unit.",
    }
    assert props["hours"] == {
        "anyOf": [{"type": "array", "items": {"type": "integer"}}, {"type": "null"}],
        "default": None,
    }
    assert props["detail"] == {"type": "string", "enum": ["short", "long"], "default": "short"}
    assert props["precision"] == {"type": "number", "default": 0.5}
    assert props["include_wind"] == {"type": "boolean", "default": False}
    assert props["title"]["anyOf"] == [{"type": "string"}, {"type": "null"}]
    # No pydantic titles, no $defs/$ref indirection left for the model to resolve.
    assert not {"title", "$defs", "$ref"} & _keys(parameters)


def test_schema_from_numpy_and_rest_docstrings() -> None:
    def numpy_style(query: str, limit: int = 5) -> str:
        """Search things.

        Parameters
        ----------
        query : str
            What to search for.
        limit : int
            How many results.
        """
        return query

    def rest_style(query: str) -> str:
        """Search things.

        :param query: What to search for.
        """
        return query

    props = Tool.from_function(numpy_style).parameters["properties"]
    assert props["query"]["description"] == "What to search for."
    assert props["limit"] == {"type": "integer", "default": 5, "description": "How many results."}
    rest = Tool.from_function(rest_style)
    assert rest.description == "Search things."
    assert rest.parameters["properties"]["query"]["description"] == "What to search for."


def test_nested_model_is_inlined_and_explicit_description_wins() -> None:
    def distance(a: Point, b: Point) -> float:
        """Ignored docstring."""
        return ((a.x - b.x) ** 2 + (a.y - b.y) ** 2) ** 0.5

    made = Tool.from_function(distance, name="dist", description="Euclidean distance.")
    assert made.name == "dist"
    assert made.description == "Euclidean distance."
    point = {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}}}
    assert made.parameters["properties"]["a"] == {**point, "required": ["x", "y"]}
    assert asyncio.run(made.call({"a": {"x": 0, "y": 0}, "b": {"x": 3, "y": 4}})) == "5.0"


def test_function_without_parameters_or_docstring() -> None:
    def ping() -> str:
        return "pong"

    made = Tool.from_function(ping)
    assert made.schema()["function"] == {
        "name": "ping",
        "description": "",
        "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
    }
    assert asyncio.run(made.call({})) == "pong"


def _varargs(*values: int) -> int:
    return sum(values)


def _kwargs(**options: str) -> str:
    return ""


def _untyped(x, y: int) -> int:  # x has no hint on purpose
    return y


def _positional_only(x: int, /) -> int:
    return x


@pytest.mark.parametrize(
    ("fn", "message"),
    [
        (_varargs, r"\*args and \*\*kwargs"),
        (_kwargs, r"\*args and \*\*kwargs"),
        (_untyped, "parameter 'x' of tool '_untyped' has no type hint"),
        (_positional_only, "positional-only"),
    ],
)
def test_uncallable_signatures_are_refused_at_definition(fn: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        Tool.from_function(fn)


def test_bad_names_are_refused() -> None:
    with pytest.raises(ValueError, match="pass name="):
        Tool.from_function(lambda x: x)
    with pytest.raises(ValueError, match="is not allowed"):
        Tool.from_function(forecast, name="get weather")


def test_decorator_bare_and_with_options_keeps_the_function_callable() -> None:
    @tool
    def add(a: int, b: int = 1) -> int:
        """Add two integers."""
        return a + b

    @tool(name="multiply", timeout_s=2.0)
    def mul(a: int, b: int) -> int:
        return a * b

    assert isinstance(add, Tool) and isinstance(mul, Tool)
    assert add(2, 3) == 5 and add(a=2) == 3
    assert mul.name == "multiply" and mul.timeout_s == 2.0
    assert add.__doc__ == "Add two integers."


# --- calling ---------------------------------------------------------------------------------------


def test_call_coerces_like_pydantic_and_converts_the_result_to_text() -> None:
    made = Tool.from_function(forecast)
    text = asyncio.run(made.call({"city": "Paris", "days": "3", "unit": "fahrenheit", "hours": ["6", 12]}))
    assert text == '{"city": "Paris", "days": 3, "unit": "fahrenheit", "hours": [6, 12]}'
    with pytest.raises(ToolArgumentsError, match=r"days: Input should be a valid integer"):
        asyncio.run(made.call({"city": "Paris", "days": "soon"}))


def test_sync_tools_run_in_a_thread_and_async_tools_on_the_loop() -> None:
    loop_thread: list[bool] = []

    def sync_tool(x: int) -> int:
        loop_thread.append(_on_event_loop())
        return x

    async def async_tool(x: int) -> int:
        loop_thread.append(_on_event_loop())
        return x

    assert asyncio.run(Tool.from_function(sync_tool).call({"x": 1})) == "1"
    assert asyncio.run(Tool.from_function(async_tool).call({"x": 2})) == "2"
    assert loop_thread == [False, True]


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


# --- the registry ------------------------------------------------------------------------------------


def _divide(a: float, b: float) -> float:
    """Divide a by b."""
    if b == 0:
        raise ValueError("b must not be zero")
    return a / b


def _slow_sync(seconds: float) -> str:
    time.sleep(seconds)
    return "done"


async def _slow_async(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "done"


def _raises_timeout() -> str:
    raise TimeoutError("upstream API timed out")


def _picky(n: int) -> int:
    if n % 2:
        raise ToolArgumentsError("n must be even")
    return n


def _registry() -> ToolRegistry:
    return ToolRegistry(
        [
            _divide,
            Tool.from_function(_slow_sync, name="slow_sync", timeout_s=0.2),
            Tool.from_function(_slow_async, name="slow_async", timeout_s=0.2),
            _raises_timeout,
            _picky,
        ],
        default_timeout_s=5.0,
    )


def test_registry_bookkeeping() -> None:
    registry = _registry()
    assert registry.names == ["_divide", "slow_sync", "slow_async", "_raises_timeout", "_picky"]
    assert len(registry) == 5 and "_divide" in registry and "nope" not in registry
    assert registry.get("_divide") is not None and registry.get("nope") is None
    assert [s["function"]["name"] for s in registry.schemas()] == registry.names
    with pytest.raises(ValueError, match="already registered"):
        registry.register(_divide)
    with pytest.raises(ValueError, match="default_timeout_s"):
        ToolRegistry(default_timeout_s=0)


def test_success_result() -> None:
    result = asyncio.run(_registry().execute(_call("_divide", '{"a": 6, "b": 4}', call_id="call_9")))
    assert result.error is None
    assert (result.call_id, result.name, result.content) == ("call_9", "_divide", "1.5")
    assert result.latency_s >= 0
    assert result.to_openai() == {"role": "tool", "tool_call_id": "call_9", "content": "1.5"}


def test_unknown_tool_lists_the_available_ones() -> None:
    result = asyncio.run(ToolRegistry([_divide, _picky]).execute(_call("foo")))
    assert result.error == "unknown_tool"
    assert result.content == "Error: unknown tool 'foo'. Available tools: _divide, _picky."
    assert asyncio.run(ToolRegistry().execute(_call("foo"))).content.endswith("Available tools: none.")


@pytest.mark.parametrize(
    ("arguments", "content"),
    [
        ("{not json", "Error: the arguments of _divide are not valid JSON (Expecting property name"),
        ("[1, 2]", "Error: invalid arguments for _divide: arguments must be a JSON object, got a JSON array"),
        ('{"a": 1}', "Error: invalid arguments for _divide: missing required argument 'b'"),
        (
            '{"a": "one", "b": 2, "c": 3}',
            (
                "Error: invalid arguments for _divide: a: Input should be a valid number, unable to parse "
                "string as a number (got \"one\"); unexpected argument 'c'"
            ),
        ),
    ],
)
def test_invalid_arguments_are_reported_briefly(arguments: str, content: str) -> None:
    result = asyncio.run(_registry().execute(_call("_divide", arguments)))
    assert result.error == "invalid_arguments"
    assert result.content.startswith(content)
    assert "https://" not in result.content and "\n" not in result.content


def test_a_tool_may_reject_its_arguments_itself() -> None:
    result = asyncio.run(_registry().execute(_call("_picky", '{"n": 3}')))
    assert (result.error, result.content) == (
        "invalid_arguments",
        "Error: invalid arguments for _picky: n must be even",
    )


def test_exceptions_become_observations_without_traceback(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("DEBUG", logger="rllm.tools.tool"):
        result = asyncio.run(_registry().execute(_call("_divide", '{"a": 1, "b": 0}')))
    assert result.error == "exception"
    assert result.content == "Error: _divide raised ValueError: b must not be zero"
    assert "Traceback" in caplog.text  # the traceback goes to the debug log, not to the model


def test_a_tools_own_timeout_error_is_an_exception_not_a_timeout() -> None:
    result = asyncio.run(_registry().execute(_call("_raises_timeout")))
    assert result.error == "exception"
    assert result.content == "Error: _raises_timeout raised TimeoutError: upstream API timed out"


@pytest.mark.parametrize("name", ["slow_sync", "slow_async"])
def test_timeouts(name: str) -> None:
    start = time.perf_counter()
    result = asyncio.run(_registry().execute(_call(name, '{"seconds": 1.0}')))
    assert result.error == "timeout"
    assert result.content == f"Error: {name} timed out after 0.2s."
    assert 0.2 <= result.latency_s < 0.8
    # asyncio.run waits for the default executor, so the sync tool's thread finishes its 1 s here.
    assert time.perf_counter() - start < 3.0


def test_registry_default_timeout_applies_to_tools_without_their_own() -> None:
    registry = ToolRegistry([Tool.from_function(_slow_async)], default_timeout_s=0.1)
    result = asyncio.run(registry.execute(_call("_slow_async", '{"seconds": 2}')))
    assert (result.error, result.content) == ("timeout", "Error: _slow_async timed out after 0.1s.")


def test_execute_all_runs_concurrently_and_keeps_order() -> None:
    registry = ToolRegistry([_slow_async])
    calls = [
        _call("_slow_async", f'{{"seconds": {s}}}', call_id=f"c{i}") for i, s in enumerate([0.6, 0.2, 0.4])
    ]
    calls.append(_call("nope", call_id="c3"))
    start = time.perf_counter()
    results = asyncio.run(registry.execute_all(calls))
    assert time.perf_counter() - start < 1.0  # concurrent: about the longest call, not the 1.2 s sum
    assert [r.call_id for r in results] == ["c0", "c1", "c2", "c3"]
    assert [r.error for r in results] == [None, None, None, "unknown_tool"]


def test_malformed_helper_and_metrics() -> None:
    malformed = ToolRegistry.malformed("tool call 1 is not valid JSON")
    assert malformed == ToolResult(
        call_id="", name="", content="Error: tool call 1 is not valid JSON", error="malformed", latency_s=0.0
    )
    registry = _registry()
    calls = [
        _call("_divide", '{"a": 1, "b": 2}'),
        _call("_divide", '{"a": 1, "b": 2}'),
        _call("_divide", '{"a": 1, "b": 0}'),
        _call("_divide", "{"),
        _call("nope"),
        _call("slow_async", '{"seconds": 5}'),
    ]
    results = [*asyncio.run(registry.execute_all(calls)), malformed]
    assert tool_metrics(results) == {
        "tools/calls": 7.0,
        "tools/ok": 2.0,
        "tools/errors/malformed": 1.0,
        "tools/errors/unknown_tool": 1.0,
        "tools/errors/invalid_arguments": 1.0,
        "tools/errors/exception": 1.0,
        "tools/errors/timeout": 1.0,
    }
    empty = tool_metrics([])
    assert set(empty) == {"tools/calls", "tools/ok"} | {f"tools/errors/{kind}" for kind in TOOL_ERRORS}
    assert set(empty.values()) == {0.0}


def test_importing_rllm_tools_loads_no_optional_package() -> None:
    code = "import sys, rllm.tools; print(sorted({m.split('.')[0] for m in sys.modules} & {'mcp', 'bm25s', 'torch'}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
