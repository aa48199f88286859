"""Tools an agent can call, and the registry that runs the calls a model makes.

A ``Tool`` is a Python function plus the JSON schema a model sees for it. ``Tool.from_function`` (or the
``@tool`` decorator) builds that schema from the type hints and the docstring, so a tool is written
once, as ordinary typed Python::

    @tool
    def add(a: int, b: int = 0) -> int:
        \"\"\"Add two integers.

        Args:
            a: The first addend.
            b: The second addend.
        \"\"\"
        return a + b

A ``ToolRegistry`` holds the tools of one agent: ``schemas()`` is the OpenAI ``tools`` list for the
prompt, and ``execute(call)`` runs one parsed ``ToolCall``. Whatever goes wrong (an unknown name, bad
arguments, the tool raising or hanging) comes back as a ``ToolResult`` whose ``content`` tells the model
what happened, so an episode goes on and the model can retry; ``tool_metrics`` counts those outcomes.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import re
import time
import typing
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

import docstring_parser
import pydantic
from pydantic import BaseModel, ConfigDict
from pydantic_core import to_jsonable_python

from rllm.tool_calls import ToolCall

logger = logging.getLogger(__name__)

ToolError = Literal["malformed", "unknown_tool", "invalid_arguments", "exception", "timeout"]
TOOL_ERRORS: tuple[ToolError, ...] = typing.get_args(ToolError)

# OpenAI allows ^[a-zA-Z0-9_-]{1,64}$; MCP servers also use '.', which our own parsers handle fine.
_NAME_RE = re.compile(r"[A-Za-z0-9_.\-]{1,128}")
# How much of a bad argument value an error message quotes back to the model.
_VALUE_CHARS = 80
# Keys of a JSON schema whose values are data, not schemas: never rewrite inside them.
_DATA_KEYS = frozenset({"default", "const", "enum", "examples"})
# Keys whose values map names to schemas: the names are not schema keywords.
_SCHEMA_MAP_KEYS = frozenset({"properties", "$defs", "definitions", "patternProperties"})


class ToolArgumentsError(ValueError):
    """The arguments of a call do not fit the tool's parameters. The message is written for the model.

    ``Tool.call`` raises it before running the function; a tool may raise it too, to report arguments
    that type-check but make no sense (the registry reports both as ``invalid_arguments``).
    """


class Tool:
    """A function a model can call: its name, what it does, its JSON-schema parameters, and the code.

    ``validate`` turns the model's arguments (a dict decoded from JSON) into the keyword arguments of
    ``fn``, raising ``ToolArgumentsError`` when they do not fit; ``from_function`` derives it from the
    type hints. ``timeout_s`` overrides the registry's default timeout for this tool.
    The tool stays callable as the original function: ``add(1, 2)`` calls ``fn`` directly.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str,
        description: str,
        parameters: Mapping[str, Any],
        validate: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        timeout_s: float | None = None,
    ) -> None:
        _check_name(name)
        if timeout_s is not None and timeout_s <= 0:
            raise ValueError(f"timeout_s of tool {name!r} must be positive or None, got {timeout_s}")
        self.fn = fn
        self.name = name
        self.description = description
        self.parameters = dict(parameters)
        self.timeout_s = timeout_s
        self._validate = validate or _require_object
        self.__wrapped__ = fn
        self.__doc__ = fn.__doc__

    @classmethod
    def from_function(
        cls,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        timeout_s: float | None = None,
    ) -> Tool:
        """A tool whose schema comes from ``fn``'s type hints and whose descriptions come from its docstring.

        Every parameter needs a type hint that pydantic understands (``int``, ``list[str]``,
        ``Literal[...]``, ``Optional``, an ``Enum``, a pydantic model, ...); defaults make a parameter
        optional. The docstring may be Google, NumPy or reST style: its summary (and body) becomes the
        tool's description unless ``description`` is given, and each documented parameter its
        ``description``. Raises ``TypeError`` for what a model cannot call: ``*args``, ``**kwargs``,
        positional-only or untyped parameters.
        """
        tool_name = name or getattr(fn, "__name__", "")
        _check_name(tool_name)
        signature = inspect.signature(fn)
        try:
            hints = typing.get_type_hints(fn, include_extras=True)
        except Exception as err:  # NameError for an unresolvable string annotation, and its kin
            raise TypeError(f"cannot resolve the type hints of tool {tool_name!r}: {err}") from err
        doc = docstring_parser.parse(inspect.getdoc(fn) or "")
        param_docs = {p.arg_name: p.description for p in doc.params if p.description}

        fields: dict[str, Any] = {}
        for param in signature.parameters.values():
            where = f"parameter {param.name!r} of tool {tool_name!r}"
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise TypeError(
                    f"{where}: *args and **kwargs cannot be called by a model; name each argument"
                )
            if param.kind is param.POSITIONAL_ONLY:
                raise TypeError(f"{where} is positional-only; tools are called with keyword arguments")
            if param.name not in hints:
                raise TypeError(f"{where} has no type hint; annotate it (e.g. `{param.name}: str`)")
            default = ... if param.default is param.empty else param.default
            fields[param.name] = (
                hints[param.name],
                pydantic.Field(default, description=param_docs.get(param.name)),
            )

        config = ConfigDict(extra="forbid", protected_namespaces=())
        try:
            model = pydantic.create_model(f"{tool_name}_arguments", __config__=config, **fields)
            parameters = _clean_schema(model.model_json_schema())
        except (pydantic.PydanticUserError, pydantic.errors.PydanticSchemaGenerationError, TypeError) as err:
            raise TypeError(f"cannot build the JSON schema of tool {tool_name!r}: {err}") from err
        if description is None:
            description = "\n\n".join(part for part in (doc.short_description, doc.long_description) if part)

        def validate(arguments: dict[str, Any]) -> dict[str, Any]:
            try:
                validated = model.model_validate(arguments)
            except pydantic.ValidationError as err:
                raise ToolArgumentsError(_describe_validation_error(err)) from None
            return {field: getattr(validated, field) for field in type(validated).model_fields}

        return cls(
            fn,
            name=tool_name,
            description=description,
            parameters=parameters,
            validate=validate,
            timeout_s=timeout_s,
        )

    def schema(self) -> dict[str, Any]:
        """This tool as one entry of the OpenAI ``tools`` list."""
        function = {"name": self.name, "description": self.description, "parameters": self.parameters}
        return {"type": "function", "function": function}

    def validate_arguments(self, arguments: Any) -> dict[str, Any]:
        """The keyword arguments for ``fn``; raises ``ToolArgumentsError`` when ``arguments`` do not fit."""
        if not isinstance(arguments, dict):
            raise ToolArgumentsError(f"arguments must be a JSON object, got a JSON {_json_type(arguments)}")
        return self._validate(arguments)

    async def call(self, arguments: dict[str, Any]) -> str:
        """Validate ``arguments`` (pydantic's lax coercion: ``"3"`` fits an ``int``), run ``fn``, return text.

        Sync functions run in a worker thread (``asyncio.to_thread``) so a slow tool does not block the
        event loop; async functions are awaited. The result is the text the model reads: a ``str`` as is,
        anything else as JSON. Raises ``ToolArgumentsError`` for bad arguments, and whatever ``fn`` raises.
        """
        kwargs = self.validate_arguments(arguments)
        if inspect.iscoroutinefunction(self.fn):
            value = await self.fn(**kwargs)
        else:
            value = await asyncio.to_thread(self.fn, **kwargs)
            if inspect.isawaitable(value):  # a sync wrapper (functools.partial, a lambda) around a coroutine
                value = await value
        return _to_text(value)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Tool(name={self.name!r}, timeout_s={self.timeout_s})"


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_s: float | None = None,
) -> Any:
    """Decorator form of ``Tool.from_function``: ``@tool`` or ``@tool(name=..., timeout_s=...)``."""

    def wrap(f: Callable[..., Any]) -> Tool:
        return Tool.from_function(f, name=name, description=description, timeout_s=timeout_s)

    return wrap if fn is None else wrap(fn)


class ToolResult(BaseModel):
    """What came of one tool call: the text the model reads next, and whether the call failed and how.

    ``content`` is always set, also on failure (then it explains the error to the model). ``error`` is
    ``None`` on success; ``latency_s`` is the wall time from receiving the call to the result.
    """

    call_id: str
    name: str
    content: str
    error: ToolError | None = None
    latency_s: float

    def to_openai(self) -> dict[str, Any]:
        """This result as an OpenAI ``tool`` message answering the call ``call_id``."""
        return {"role": "tool", "tool_call_id": self.call_id, "content": self.content}


class ToolRegistry:
    """The tools of one agent, by name, and the one place their calls are run.

    ``execute`` never raises for a problem of the tool or the call: it returns a ``ToolResult`` with
    ``error`` set. Timeouts use ``asyncio.wait_for``: an async tool is cancelled, but a sync tool runs
    in a worker thread that Python cannot kill, so it keeps running (and holds a thread of the default
    executor) until it returns; tools that may hang must enforce their own limit (the sandboxed python
    tool kills its subprocess).
    """

    def __init__(
        self, tools: Iterable[Tool | Callable[..., Any]] = (), *, default_timeout_s: float = 10.0
    ) -> None:
        if default_timeout_s <= 0:
            raise ValueError(f"default_timeout_s must be positive, got {default_timeout_s}")
        self.default_timeout_s = default_timeout_s
        self._tools: dict[str, Tool] = {}
        for item in tools:
            self.register(item)

    def register(self, tool_or_function: Tool | Callable[..., Any]) -> Tool:
        """Add a tool (a plain function is wrapped with ``Tool.from_function``); returns the ``Tool``."""
        item = (
            tool_or_function if isinstance(tool_or_function, Tool) else Tool.from_function(tool_or_function)
        )
        if item.name in self._tools:
            raise ValueError(f"a tool named {item.name!r} is already registered; pass name=... to rename one")
        self._tools[item.name] = item
        return item

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def schemas(self) -> list[dict[str, Any]]:
        """The OpenAI ``tools`` list, in registration order (``format_tools_prompt`` renders it)."""
        return [item.schema() for item in self._tools.values()]

    @staticmethod
    def malformed(message: str) -> ToolResult:
        """The result for a call the parser could not read (one of ``ParsedResponse.errors``)."""
        return ToolResult(call_id="", name="", content=f"Error: {message}", error="malformed", latency_s=0.0)

    async def execute(self, call: ToolCall) -> ToolResult:
        """Run one call; every failure becomes a result whose ``content`` tells the model what went wrong."""
        start = time.perf_counter()

        def result(content: str, error: ToolError | None = None) -> ToolResult:
            latency_s = time.perf_counter() - start
            return ToolResult(
                call_id=call.id, name=call.name, content=content, error=error, latency_s=latency_s
            )

        item = self._tools.get(call.name)
        if item is None:
            available = ", ".join(self._tools) or "none"
            return result(f"Error: unknown tool {call.name!r}. Available tools: {available}.", "unknown_tool")
        try:
            arguments = json.loads(call.arguments) if call.arguments.strip() else {}
        except json.JSONDecodeError as err:
            message = (
                f"Error: the arguments of {item.name} are not valid JSON ({err.msg} at column {err.colno})."
            )
            return result(message, "invalid_arguments")

        timeout_s = item.timeout_s if item.timeout_s is not None else self.default_timeout_s
        try:
            outcome = await asyncio.wait_for(_capture(item.call(arguments)), timeout_s)
        except asyncio.TimeoutError:
            return result(f"Error: {item.name} timed out after {timeout_s:g}s.", "timeout")
        if not isinstance(outcome, BaseException):
            return result(outcome)
        if isinstance(outcome, ToolArgumentsError):
            return result(f"Error: invalid arguments for {item.name}: {outcome}", "invalid_arguments")
        logger.debug("tool %s raised", item.name, exc_info=outcome)
        return result(f"Error: {item.name} raised {type(outcome).__name__}: {outcome}", "exception")

    async def execute_all(self, calls: Sequence[ToolCall]) -> list[ToolResult]:
        """Run ``calls`` concurrently; results come back in the order of ``calls``."""
        return list(await asyncio.gather(*(self.execute(call) for call in calls)))


def tool_metrics(results: Sequence[ToolResult]) -> dict[str, float]:
    """Counts of calls and of each outcome, for logging; every key is present (``0.0`` when none)."""
    metrics = {"tools/calls": float(len(results)), "tools/ok": 0.0}
    metrics |= {f"tools/errors/{kind}": 0.0 for kind in TOOL_ERRORS}
    for result in results:
        metrics["tools/ok" if result.error is None else f"tools/errors/{result.error}"] += 1.0
    return metrics


# --- helpers ----------------------------------------------------------------------------------------


def _check_name(name: str) -> None:
    if not _NAME_RE.fullmatch(name):
        raise ValueError(
            f"tool name {name!r} is not allowed: use 1-128 letters, digits, '_', '-' or '.' "
            "(OpenAI allows at most 64 and no '.'); pass name=... to choose one"
        )


async def _capture(awaitable: Awaitable[str]) -> str | Exception:
    """``awaitable``'s value, or the exception it raised: keeps a tool's own TimeoutError apart from ours."""
    try:
        return await awaitable
    except Exception as err:  # noqa: BLE001 — any error of a tool becomes an observation
        return err


def _require_object(arguments: dict[str, Any]) -> dict[str, Any]:
    return arguments


def _to_text(value: Any) -> str:
    """What the model reads for a tool's return value: a ``str`` as is, anything else as JSON.

    ``to_jsonable_python`` makes enums, pydantic models, dataclasses, sets and datetimes JSON the way
    pydantic would; ``str()`` is the fallback for the rest (``json.dumps(..., default=str)``).
    """
    if isinstance(value, str):
        return value
    return json.dumps(to_jsonable_python(value, fallback=str), ensure_ascii=False)


def _json_type(value: Any) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= _VALUE_CHARS else text[:_VALUE_CHARS] + "…"


def _describe_validation_error(err: pydantic.ValidationError) -> str:
    """Pydantic's errors as one line per problem, naming the argument (``xs[2]``), without URLs."""
    problems = []
    for item in err.errors(include_url=False):
        loc = item["loc"]
        path = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc).lstrip(".")
        if item["type"] == "missing":
            problems.append(f"missing required argument {path!r}")
        elif item["type"] == "extra_forbidden":
            problems.append(f"unexpected argument {path!r}")
        else:
            problems.append(f"{path}: {item['msg']} (got {_short(item['input'])})")
    return "; ".join(problems)


class _RecursiveRef(Exception):
    """A ``$ref`` to a type being inlined (or to no type): such a schema keeps its ``$defs``."""


def _clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Pydantic's schema without ``title`` noise, with ``$defs`` inlined unless a type is recursive."""
    defs = schema.get("$defs", {})
    try:
        inlined = _inline_refs({k: v for k, v in schema.items() if k != "$defs"}, defs, ())
    except _RecursiveRef:
        inlined = schema
    return _drop_titles(inlined)


def _inline_refs(node: Any, defs: Mapping[str, Any], seen: tuple[str, ...]) -> Any:
    if isinstance(node, list):
        return [_inline_refs(item, defs, seen) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        target = ref.removeprefix("#/$defs/")
        if target in seen or target not in defs:
            raise _RecursiveRef(target)
        resolved = _inline_refs(defs[target], defs, (*seen, target))
        siblings = {k: _inline_refs(v, defs, seen) for k, v in node.items() if k != "$ref"}
        return {**resolved, **siblings}
    return {k: v if k in _DATA_KEYS else _inline_refs(v, defs, seen) for k, v in node.items()}


def _drop_titles(node: Any) -> Any:
    if isinstance(node, list):
        return [_drop_titles(item) for item in node]
    if not isinstance(node, dict):
        return node
    cleaned = {}
    for key, value in node.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in _DATA_KEYS:
            cleaned[key] = value
        elif key in _SCHEMA_MAP_KEYS and isinstance(value, dict):
            cleaned[key] = {name: _drop_titles(sub) for name, sub in value.items()}
        else:
            cleaned[key] = _drop_titles(value)
    return cleaned
