"""Tool-call parsing (Hermes ``<tool_call>`` blocks) and its inverse, the text rendering of calls.

Malformed calls must surface as one readable error each, never an exception and never a silent drop.
"""

from __future__ import annotations

import json

import pytest

from rllm.tool_calls import (
    HermesToolParser,
    NoToolParser,
    ToolCall,
    format_assistant_text,
    format_tool_call_text,
    format_tools_prompt,
    get_tool_parser,
    tool_calls_from_openai,
)


def block(payload: str) -> str:
    return f"<tool_call>\n{payload}\n</tool_call>"


def parse(text: str):
    return HermesToolParser(id_seed=0).parse(text)


def test_single_call() -> None:
    out = parse(block('{"name": "get_weather", "arguments": {"city": "Paris"}}'))
    assert out.content is None
    assert out.errors == []
    [call] = out.tool_calls
    assert call.name == "get_weather"
    assert json.loads(call.arguments) == {"city": "Paris"}
    assert call.id.startswith("call_") and len(call.id) == len("call_") + 24


def test_multiple_calls_with_text_around() -> None:
    text = (
        "Let me check both.\n"
        + block('{"name": "a", "arguments": {"x": 1}}')
        + "\nand\n"
        + block('{"name": "b", "arguments": {}}')
        + "\n  "
    )
    out = parse(text)
    assert out.errors == []
    assert [c.name for c in out.tool_calls] == ["a", "b"]
    assert out.content == "Let me check both.\n\nand"
    assert len({c.id for c in out.tool_calls}) == 2


def test_plain_text_is_content_only() -> None:
    out = parse("  Just an answer.\n")
    assert out.content == "Just an answer."
    assert out.tool_calls == [] and out.errors == []


def test_arguments_as_json_string_and_missing_arguments() -> None:
    out = parse(block('{"name": "f", "arguments": "{\\"q\\": \\"naïve\\"}"}') + block('{"name": "g"}'))
    assert out.errors == []
    assert json.loads(out.tool_calls[0].arguments) == {"q": "naïve"}
    assert "naïve" in out.tool_calls[0].arguments  # unicode is kept, not \u-escaped
    assert out.tool_calls[1].arguments == "{}"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (block('{"name": "f", "arguments": {"x": 1}'), "not valid JSON"),
        (block('{"arguments": {"x": 1}}'), 'no "name"'),
        (block('{"name": "", "arguments": {}}'), 'no "name"'),
        (block('["f", {"x": 1}]'), "JSON list, not an object"),
        (block('{"name": "f", "arguments": [1, 2]}'), '"arguments" must be a JSON object'),
        (block('{"name": "f", "arguments": "[1, 2]"}'), '"arguments" must be a JSON object'),
        (block('{"name": "f", "arguments": "not json"}'), "string that is not valid JSON"),
        ('<tool_call>\n{"name": "f", "arguments": {}}', "was not closed"),
    ],
)
def test_malformed_call_is_reported_not_raised(text: str, expected: str) -> None:
    out = parse("Before. " + text)
    assert out.tool_calls == []
    assert len(out.errors) == 1
    assert expected in out.errors[0]
    assert out.errors[0].startswith("tool call 1")
    assert out.content == "Before."


def test_good_call_survives_a_bad_one_and_errors_are_numbered() -> None:
    text = block('{"name": "bad" "arguments": {}}') + block('{"name": "good", "arguments": {}}')
    out = parse(text)
    assert [c.name for c in out.tool_calls] == ["good"]
    assert len(out.errors) == 1 and out.errors[0].startswith("tool call 1 is not valid JSON")
    assert '{"name": "bad"' in out.errors[0], "the error quotes what the model wrote"


def test_unclosed_block_followed_by_another_call() -> None:
    text = '<tool_call>\n{"name": "a", "arguments": {}}\n' + block('{"name": "b", "arguments": {}}')
    out = parse(text)
    assert [c.name for c in out.tool_calls] == ["b"]
    assert len(out.errors) == 1 and "tool call 1 was not closed" in out.errors[0]


def test_closing_tag_without_opening_is_an_error() -> None:
    out = parse('{"name": "f", "arguments": {}}\n</tool_call>')
    assert out.tool_calls == []
    assert len(out.errors) == 1 and "without an opening <tool_call>" in out.errors[0]


def test_ids_are_deterministic_with_a_seed_and_unique() -> None:
    text = block('{"name": "a", "arguments": {}}') * 3
    first = [c.id for c in HermesToolParser(id_seed=7).parse(text).tool_calls]
    again = [c.id for c in HermesToolParser(id_seed=7).parse(text).tool_calls]
    assert first == again and len(set(first)) == 3
    unseeded = [c.id for c in HermesToolParser().parse(text).tool_calls]
    assert len(set(unseeded)) == 3 and all(i.startswith("call_") for i in unseeded)


def test_format_then_parse_round_trips() -> None:
    calls = [
        ToolCall(id="call_1", name="get_weather", arguments='{"city":"Tōkyō"}'),
        ToolCall(id="call_2", name="calc", arguments='{"expression": "1 + 1"}'),
    ]
    text = format_assistant_text("Checking.", calls)
    assert text.startswith("Checking.\n<tool_call>\n")
    out = parse(text)
    assert out.content == "Checking." and out.errors == []
    assert [(c.name, json.loads(c.arguments)) for c in out.tool_calls] == [
        (c.name, json.loads(c.arguments)) for c in calls
    ]
    # Parsed arguments are normalised the same way format_tool_call_text writes them: a fixed point.
    assert format_assistant_text(out.content, out.tool_calls) == text


def test_format_tool_call_text_shape() -> None:
    assert format_tool_call_text("f", '{"a":1}') == (
        '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>'
    )
    assert format_tool_call_text("f", {"a": "é"}) == (
        '<tool_call>\n{"name": "f", "arguments": {"a": "é"}}\n</tool_call>'
    )
    # Arguments a client sent back that are not JSON stay parseable (as a JSON string).
    out = parse(format_tool_call_text("f", "oops"))
    assert out.tool_calls == [] and "string that is not valid JSON" in out.errors[0]
    assert format_assistant_text(None, []) == "" and format_assistant_text("hi", []) == "hi"


def test_tools_prompt_lists_functions_and_rejects_bad_tools() -> None:
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    prompt = format_tools_prompt([tool])
    assert "<tools>\n" + json.dumps(tool) + "\n</tools>" in prompt
    assert "<tool_call>" in prompt
    with pytest.raises(ValueError, match=r"tools\[0\] must be an OpenAI tool"):
        format_tools_prompt([{"name": "get_weather"}])


def test_tool_calls_from_openai() -> None:
    calls = tool_calls_from_openai(
        [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]
    )
    assert calls == [ToolCall(id="c1", name="f", arguments='{"x": 1}')]
    assert calls[0].to_openai() == {
        "id": "c1",
        "type": "function",
        "function": {"name": "f", "arguments": '{"x": 1}'},
    }
    with pytest.raises(ValueError, match=r"tool_calls\[0\] is not an OpenAI tool call"):
        tool_calls_from_openai([{"id": "c1", "function": {"arguments": "{}"}}])


def test_registry() -> None:
    assert isinstance(get_tool_parser("hermes"), HermesToolParser)
    none = get_tool_parser("none")
    assert isinstance(none, NoToolParser)
    out = none.parse(block('{"name": "f", "arguments": {}}'))
    assert out.tool_calls == [] and out.content == block('{"name": "f", "arguments": {}}')
    assert none.parse("").content is None
    seeded = get_tool_parser("hermes", id_seed=3).parse(block('{"name": "f"}')).tool_calls[0].id
    assert seeded == HermesToolParser(id_seed=3).parse(block('{"name": "f"}')).tool_calls[0].id
    with pytest.raises(ValueError, match="unknown tool parser 'qwen': use one of hermes, none"):
        get_tool_parser("qwen")
