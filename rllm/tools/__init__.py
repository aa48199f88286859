"""Tool calling: tools an agent can call, the registry that runs them, and how calls look in model text.

- ``rllm.tools.tool``: ``Tool`` / ``@tool`` (schema from type hints and docstring), ``ToolRegistry``
  (runs a model's calls; every failure becomes a ``ToolResult`` the model reads), ``tool_metrics``.
- ``rllm.tools.builtin``: ``calculator``, ``make_python_tool`` (sandboxed), ``make_search_tool`` (BM25).
- ``rllm.tools.named``: tools by name for ``workflow.tools`` (``TOOLS``, ``register_tool``, ``tool_names``).
- ``rllm.tool_calls`` (re-exported here): the Hermes/Qwen ``<tool_call>`` format and the ``get_tool_parser``
  registry; a module of its own below every layer, since the chat renderer and the gateway use it too.
- ``rllm.tools.mcp``: ``MCPToolSource``, the tools of an MCP server (needs ``pip install 'rllm[mcp]'``;
  imported from there, not here, so rllm does not need the mcp package).
"""

from rllm.tool_calls import (
    TOOL_PARSERS,
    HermesToolParser,
    NoToolParser,
    ParsedResponse,
    ToolCall,
    ToolParser,
    format_assistant_text,
    format_tool_call_text,
    format_tool_response_text,
    format_tools_prompt,
    get_tool_parser,
    tool_calls_from_openai,
)
from rllm.tools.builtin import CalculatorError, calculator, make_python_tool, make_search_tool
from rllm.tools.named import (
    TOOLS,
    ToolCapabilities,
    ToolFactory,
    make_named_tool,
    register_tool,
    tool_names,
    unregister_tool,
)
from rllm.tools.tool import (
    TOOL_ERRORS,
    Tool,
    ToolArgumentsError,
    ToolError,
    ToolRegistry,
    ToolResult,
    tool,
    tool_metrics,
)

__all__ = [
    "TOOLS",
    "TOOL_ERRORS",
    "TOOL_PARSERS",
    "CalculatorError",
    "HermesToolParser",
    "NoToolParser",
    "ParsedResponse",
    "Tool",
    "ToolArgumentsError",
    "ToolCall",
    "ToolCapabilities",
    "ToolError",
    "ToolFactory",
    "ToolParser",
    "ToolRegistry",
    "ToolResult",
    "calculator",
    "format_assistant_text",
    "format_tool_call_text",
    "format_tool_response_text",
    "format_tools_prompt",
    "get_tool_parser",
    "make_named_tool",
    "make_python_tool",
    "make_search_tool",
    "register_tool",
    "tool",
    "tool_calls_from_openai",
    "tool_metrics",
    "tool_names",
    "unregister_tool",
]
