"""MCPToolSource against a real MCP server: a subprocess speaking stdio, written by the test."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from rllm.tools import ToolCall, ToolRegistry, tool_metrics
from rllm.tools.mcp import MCPToolSource

_SERVER = '''
try:
    from mcp.server.mcpserver import MCPServer
except ImportError:  # the 1.x SDK
    from mcp.server.fastmcp import FastMCP as MCPServer

server = MCPServer("arithmetic")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def fail(message: str) -> str:
    """Always fails."""
    raise ValueError(message)


if __name__ == "__main__":
    server.run()
'''


@pytest.fixture
def server_script(tmp_path: Path) -> Path:
    pytest.importorskip("mcp")
    path = tmp_path / "server.py"
    path.write_text(_SERVER)
    return path


@pytest.mark.timeout(60)
def test_mcp_tools_are_listed_and_called_through_the_registry(server_script: Path) -> None:
    async def main() -> tuple[list[dict], list, MCPToolSource]:
        async with MCPToolSource([sys.executable, str(server_script)], timeout_s=20.0) as source:
            registry = ToolRegistry(source.tools)
            calls = [
                ToolCall(id="1", name="add", arguments='{"a": 2, "b": 40}'),
                ToolCall(id="2", name="add", arguments='{"a": "two"}'),
                ToolCall(id="3", name="fail", arguments='{"message": "boom"}'),
            ]
            results = await registry.execute_all(calls)
            return registry.schemas(), results, source

    schemas, results, source = asyncio.run(main())
    by_name = {s["function"]["name"]: s["function"] for s in schemas}
    assert set(by_name) == {"add", "fail"}
    assert by_name["add"]["description"] == "Add two integers."
    parameters = by_name["add"]["parameters"]  # the server's inputSchema, as the server wrote it
    assert parameters["type"] == "object" and parameters["required"] == ["a", "b"]
    assert {name: p["type"] for name, p in parameters["properties"].items()} == {
        "a": "integer",
        "b": "integer",
    }

    ok, invalid, failed = results
    assert (ok.error, ok.content) == (None, "42")
    assert invalid.error == "invalid_arguments"  # checked against the inputSchema before being sent
    assert invalid.content.startswith("Error: invalid arguments for add: ")
    assert (
        "'b' is a required property" in invalid.content
        and "'two' is not of type 'integer'" in invalid.content
    )
    assert failed.error == "exception"
    assert failed.content.startswith("Error: fail raised MCPToolError: ")
    assert tool_metrics(results)["tools/ok"] == 1.0

    # Leaving the block stopped the server: its tools now fail as observations, not crashes.
    after = asyncio.run(
        ToolRegistry(source.tools).execute(ToolCall(id="4", name="add", arguments='{"a": 1, "b": 2}'))
    )
    assert after.error == "exception" and "after its MCPToolSource was closed" in after.content


def test_without_the_mcp_package_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)  # what `import mcp` sees when it is not installed

    async def main() -> None:
        async with MCPToolSource(["server"]):
            pass

    with pytest.raises(ImportError, match=r"pip install 'rllm\[mcp\]'"):
        asyncio.run(main())


def test_a_server_that_does_not_start_raises() -> None:
    pytest.importorskip("mcp")

    async def main() -> None:
        async with MCPToolSource(["/nonexistent/mcp-server"]):
            pass

    with pytest.raises(OSError):
        asyncio.run(main())
    with pytest.raises(ValueError, match="command must name"):
        MCPToolSource([])
