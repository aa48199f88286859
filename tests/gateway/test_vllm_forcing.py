"""Which tokens of a vLLM reply to a forced ``tool_choice`` are recorded as forced (``rllm.gateway.vllm_forcing``).

The token strings are written by hand in the shapes vLLM 0.32's hermes structural tag allows (a recorded
real reply is tested in ``test_http_upstream.py``); 0 marks a forced token, 1 a sampled one.
"""

from __future__ import annotations

import logging

import pytest

from rllm.gateway.vllm_forcing import forced_reply_mask, forced_tool_choice_mask, tool_grammar

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


STRICT = [
    {"type": "function", "function": {"name": "add", "parameters": {"type": "object"}, "strict": True}},
    TOOLS[1],
]


def test_which_requests_vllm_holds_to_a_tool_call_grammar() -> None:
    assert tool_grammar(TOOLS, "required", None) == tool_grammar(TOOLS, NAMED, None) == "forced"
    assert tool_grammar(STRICT, "auto", None) == tool_grammar(STRICT, None, None) == "triggered"
    assert tool_grammar(TOOLS, "auto", False) == "triggered"  # one call at most: the envelope is held
    assert tool_grammar(TOOLS, "auto", None) is None and tool_grammar(STRICT, "none", None) is None
    assert tool_grammar(None, "auto", False) is None


def test_under_auto_with_a_strict_tool_the_call_is_forced_once_the_model_opens_it() -> None:
    """A triggered grammar: free text, ``<tool_call>`` the model's choice, the rest of the opening and the
    closing forced, then free text again (recorded from vLLM 0.32 in tests/slow/test_vllm_structured.py)."""
    tokens = [
        ("Sure", 1),
        ("<", 1),
        ("tool", 1),
        ("_", 1),
        ("call", 1),
        (">", 1),  # the trigger: the model chose to write it
        ("\n", 1),
        ('{"', 0),
        ("name", 0),
        ('":', 0),
        (' "', 0),
        ("add", 0),
        ('",', 0),
        (' "', 0),
        ("arguments", 0),
        ('":', 0),
        (' {"', 1),
        ("a", 1),
        ('":', 1),
        (" 1", 1),
        ("}}", 1),  # straddles the arguments' end and the forced closing: sampled
        ("\n", 0),
        ("</", 0),
        ("tool", 0),
        ("_call>", 0),
        (" Done", 1),  # free text again
        ("<|im_end|>", 1),
    ]
    strings = [s for s, _ in tokens]
    assert forced_tool_choice_mask(strings, STRICT, "auto") == [m for _, m in tokens]
    # One call at most (parallel_tool_calls false): the grammar ends with it, so what follows is forced.
    single = [*strings[:-2], "<|im_end|>"]
    assert forced_tool_choice_mask(single, STRICT, "auto", False) == [m for _, m in tokens[:-2]] + [0]


def test_under_auto_a_reply_without_a_call_is_all_sampled_and_a_cut_opening_is_not_an_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="rllm.gateway.vllm_forcing"):
        assert forced_tool_choice_mask(["Hello", " there"], STRICT, "auto") == [1, 1]
        assert forced_tool_choice_mask(["Hi ", "<tool_call>", '{"na'], STRICT, "auto") == [1, 1, 1]
    assert not caplog.text
    with caplog.at_level(logging.WARNING, logger="rllm.gateway.vllm_forcing"):
        assert forced_tool_choice_mask(["<tool_call>", "[1, 2]"], STRICT, "auto") == [0, 0]
    assert "does not read as the hermes tool-call format" in caplog.text


def test_required_with_one_call_at_most_forces_the_end() -> None:
    strings = ['<tool_call>{"name": "add", "arguments": ', "{}", "}</tool_call>", "<|im_end|>"]
    assert forced_tool_choice_mask(strings, TOOLS, "required", False) == [0, 1, 0, 0]
    assert forced_tool_choice_mask(strings, TOOLS, "required") == [0, 1, 0, 1]
