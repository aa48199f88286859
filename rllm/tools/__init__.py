"""Tool calling: how tool calls look in a model's text, and how to parse them back into OpenAI ``tool_calls``.

See ``rllm.tools.parsers`` (the Hermes/Qwen ``<tool_call>`` format and the ``get_tool_parser`` registry).
"""

from rllm.tools.parsers import (
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

__all__ = [
    "TOOL_PARSERS",
    "HermesToolParser",
    "NoToolParser",
    "ParsedResponse",
    "ToolCall",
    "ToolParser",
    "format_assistant_text",
    "format_tool_call_text",
    "format_tool_response_text",
    "format_tools_prompt",
    "get_tool_parser",
    "tool_calls_from_openai",
]
