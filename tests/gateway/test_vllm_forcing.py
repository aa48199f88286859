"""Which tokens of a vLLM reply to a forced ``tool_choice`` are recorded as forced (``rllm.gateway.vllm_forcing``).

The token strings are written by hand in the shapes vLLM 0.32's hermes structural tag allows (a recorded
real reply is tested in ``test_http_upstream.py``); 0 marks a forced token, 1 a sampled one.
"""

from __future__ import annotations

import logging

import pytest

from rllm.gateway.vllm_forcing import forced_reply_mask, forced_tool_choice_mask

TOOLS = [
    {"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "add_many", "parameters": {"type": "object"}}},
]
NAMED = {"type": "function", "function": {"name": "add"}}


def marked(tokens: list[tuple[str, int]], tool_choice: object) -> None:
    strings = [s for s, _ in tokens]
    assert forced_tool_choice_mask(strings, TOOLS, tool_choice) == [m for _, m in tokens]


def test_a_named_call_forces_its_literals_the_name_the_closing_and_the_end() -> None:
    marked(
        [
            ("<tool_call>", 0),
            ("\n", 1),  # a choice: with or without the newline
            ('{"', 0),
            ("name", 0),
            ('": "', 0),
            ("add", 0),
            ('", "arguments": ', 0),
            ('{"a', 1),  # the arguments are sampled
            ('": 1}', 1),
            ("}\n", 0),
            ("</tool_call>", 0),
            ("<|im_end|>", 0),  # a named call is the only one: the end is forced
        ],
        NAMED,
    )


def test_without_the_newline_the_closing_has_none_either() -> None:
    marked(
        [("<tool_call>{", 0), ('"name": "add", "arguments": ', 0), ("[", 1), ("]", 1), ("}</tool_call>", 0)],
        NAMED,
    )


def test_a_token_that_straddles_forced_and_sampled_text_is_sampled() -> None:
    marked(
        [
            ("<tool_call>", 0),
            ("\n{", 1),
            ('"name": "add", "arguments":', 0),
            (' "x"', 1),
            ("}\n</tool_call>", 0),
        ],
        NAMED,
    )


def test_required_constrains_the_name_to_the_tools_and_allows_more_calls() -> None:
    marked(
        [
            ('<tool_call>{"name": "', 0),
            ("add_many", 0),  # constrained to the tools' names: recorded as forced
            ('", "arguments": ', 0),
            ("{}", 1),
            ("}</tool_call>", 0),
            ('<tool_call>{"name": "add", "arguments": ', 0),  # a second call: the grammar allows it
            ("{}", 1),
            ("}</tool_call>", 0),
            ("<|im_end|>", 1),  # stopping is the model's choice under "required"
        ],
        "required",
    )


def test_a_reply_cut_inside_the_arguments_is_sampled_from_there() -> None:
    marked([('<tool_call>{"name": "add", "arguments": ', 0), ('{"a": ', 1), ("12", 1)], NAMED)


def test_a_reply_of_another_format_is_all_masked_and_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="rllm.gateway.vllm_forcing"):
        mask = forced_tool_choice_mask(["[TOOL_CALLS]", '[{"name": "add"}]'], TOOLS, NAMED)
    assert mask == [0, 0]
    assert "does not read as the hermes tool-call format" in caplog.text


def test_the_name_must_be_the_named_one() -> None:
    # vLLM would never write another name under a named choice; if it did, nothing here is "forced" text.
    mask = forced_tool_choice_mask(
        ['<tool_call>{"name": "add_many", "arguments": {}}</tool_call>'], TOOLS, NAMED
    )
    assert mask == [0]  # unrecognised: masked whole, never trained on


def test_without_a_string_per_token_nothing_is_trained(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="rllm.gateway.vllm_forcing"):
        assert forced_reply_mask(None, 3, TOOLS, NAMED) == [0, 0, 0]
        assert forced_reply_mask(["<tool_call>"], 2, TOOLS, NAMED) == [0, 0]
    assert caplog.text.count("every token is recorded as not sampled") == 2
    assert forced_reply_mask(['<tool_call>{"name": "add", "arguments": ', "{}"], 2, TOOLS, NAMED) == [0, 1]
