"""Tools served by an MCP server (Model Context Protocol), usable like any other ``Tool``.

``MCPToolSource`` starts a server as a subprocess (stdio transport), lists its tools and turns each
into a ``Tool`` whose schema is the server's ``inputSchema`` and whose calls go to the server::

    async with MCPToolSource(["python", "server.py"]) as source:
        registry = ToolRegistry(source.tools)
        result = await registry.execute(call)

The tools work only inside the ``async with`` block: leaving it stops the server. Needs the ``mcp``
package (``pip install 'rllm[mcp]'``); works with the 1.x and 2.x SDKs.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from typing_extensions import Self

from rllm.tools.tool import Tool, ToolArgumentsError

_INSTALL_HINT = "MCP tools need the mcp package: pip install 'rllm[mcp]'"


class MCPToolError(RuntimeError):
    """The MCP server answered a call with an error (``isError``); the message is the server's text."""


class MCPToolSource:
    """The tools of one MCP server, started from ``command`` for the duration of an ``async with``.

    ``env`` adds to the few variables the SDK passes on (``PATH``, ``HOME``, ...): the server does not
    inherit rllm's whole environment. Arguments are checked against each tool's ``inputSchema`` (with
    ``jsonschema``) before they are sent, so a bad call is an ``invalid_arguments`` result, as for local
    tools. Enter the source and call its tools from the same event loop.
    """

    def __init__(
        self,
        command: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout_s: float | None = None,
    ) -> None:
        if not command:
            raise ValueError("command must name the server's executable, e.g. ['python', 'server.py']")
        self.command = list(command)
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.timeout_s = timeout_s
        self.tools: list[Tool] = []
        self._stack: contextlib.AsyncExitStack | None = None
        self._session: Any = None

    async def __aenter__(self) -> Self:
        try:
            from mcp import ClientSession, StdioServerParameters
            from mcp.client.stdio import stdio_client
        except ImportError as err:
            raise ImportError(_INSTALL_HINT) from err
        params = StdioServerParameters(
            command=self.command[0], args=self.command[1:], env=self.env, cwd=self.cwd
        )
        stack = contextlib.AsyncExitStack()
        try:
            read, write = await stack.enter_async_context(stdio_client(params))
            self._session = await stack.enter_async_context(ClientSession(read, write))
            await self._session.initialize()
            self.tools = [self._wrap(listed) for listed in await self._list_tools()]
        except BaseException:
            await stack.aclose()
            raise
        self._stack = stack
        return self

    async def __aexit__(self, *exc: object) -> None:
        stack, self._stack, self._session = self._stack, None, None
        if stack is not None:
            await stack.aclose()

    async def _list_tools(self) -> list[dict[str, Any]]:
        """Every tool of the server, following pagination; camelCase keys as on the wire (SDK 1.x and 2.x)."""
        listed: list[dict[str, Any]] = []
        cursor = None
        while True:
            if cursor is None:
                page = await self._session.list_tools()
            else:
                from mcp.types import PaginatedRequestParams

                page = await self._session.list_tools(params=PaginatedRequestParams(cursor=cursor))
            data = page.model_dump(by_alias=True, exclude_none=True)
            listed += data.get("tools", [])
            cursor = data.get("nextCursor")
            if not cursor:
                return listed

    def _wrap(self, listed: Mapping[str, Any]) -> Tool:
        name = listed["name"]
        schema = dict(listed.get("inputSchema") or {"type": "object", "properties": {}})

        async def call_server(**arguments: Any) -> str:
            if self._session is None:
                raise RuntimeError(f"MCP tool {name!r} was called after its MCPToolSource was closed")
            result = await self._session.call_tool(name, arguments)
            data = result.model_dump(by_alias=True, exclude_none=True)
            text = _result_text(data)
            if data.get("isError"):
                raise MCPToolError(text)
            return text

        return Tool(
            call_server,
            name=name,
            description=listed.get("description") or "",
            parameters=schema,
            validate=_schema_validator(schema),
            timeout_s=self.timeout_s,
        )


def _schema_validator(schema: dict[str, Any]) -> Any:
    """Checks arguments against a JSON schema, raising ``ToolArgumentsError`` with every problem."""
    import jsonschema  # a dependency of the mcp package

    validator_cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    validator = validator_cls(schema)

    def validate(arguments: dict[str, Any]) -> dict[str, Any]:
        problems = []
        for error in sorted(validator.iter_errors(arguments), key=lambda e: list(e.absolute_path)):
            path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path).lstrip(
                "."
            )
            problems.append(f"{path}: {error.message}" if path else error.message)
        if problems:
            raise ToolArgumentsError("; ".join(problems))
        return arguments

    return validate


def _result_text(data: Mapping[str, Any]) -> str:
    """The text of a ``CallToolResult``: its text blocks, or its structured content as JSON."""
    parts = []
    for block in data.get("content", []):
        kind = block.get("type")
        if kind == "text":
            parts.append(block.get("text", ""))
        elif kind == "resource" and "text" in block.get("resource", {}):
            parts.append(block["resource"]["text"])
        else:
            parts.append(f"[{kind} content not shown]")
    if not parts and data.get("structuredContent") is not None:
        return json.dumps(data["structuredContent"], ensure_ascii=False)
    return "\n".join(parts)
