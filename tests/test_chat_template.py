"""ChatRenderer (tools and tool calls for templates with and without tool support) and the drift check.

All tests use the tiny model's tokenizer, which is SmolLM2's (plain ChatML that ignores ``tools``);
other template behaviours (native tools, no ``tool`` role, content trimming) are small Jinja templates
set on a fresh copy of it.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from transformers import AutoTokenizer

from rllm.cli.main import main
from rllm.inference import chat_template
from rllm.inference.chat_template import ChatRenderer, TemplateRenderError, check_template
from rllm.tool_calls import HermesToolParser, format_tool_call_text

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}
TOOL_CONVERSATION: list[dict[str, Any]] = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": '{"temp_c": 18}'},
    {"role": "tool", "tool_call_id": "call_2", "content": '{"temp_c": 19}'},
]

# A cut-down Qwen2.5 template: renders tools itself, calls in Hermes format, tool results as user turns.
QWEN_LIKE = (
    "{%- if tools %}{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n<tools>' }}{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}"
    "{{- '\\n</tools><|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' %}{{- '<|im_start|>user\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- elif message.role == 'assistant' %}{{- '<|im_start|>assistant' }}"
    "{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}"
    "{%- for tc in message.tool_calls or [] %}"
    '{{- \'\\n<tool_call>\\n{"name": "\' + tc.function.name + \'", "arguments": \' }}'
    "{{- (tc.function.arguments | tojson) + '}\\n</tool_call>' }}{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{{- '<|im_start|>user\\n<tool_response>\\n' + message.content + '\\n</tool_response><|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
_CHATML_TURN = "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
_GEN_PROMPT = "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
# ChatML that refuses any role but system/user/assistant (as many templates do).
NO_TOOL_ROLE = (
    "{% for message in messages %}{% if message['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('Unknown role: ' + message['role']) }}{% endif %}"
    + _CHATML_TURN
    + "{% endfor %}"
    + _GEN_PROMPT
)
# ChatML that trims message content: what the model said is re-rendered without its outer whitespace.
TRIMMING = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] | trim"
    " + '<|im_end|>' + '\\n'}}{% endfor %}" + _GEN_PROMPT
)

WHITESPACE = "whitespace in content"


@pytest.fixture(scope="module")
def base_tokenizer(tiny_model_dir: Path) -> Any:
    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture
def tokenizer(base_tokenizer: Any) -> Any:
    """A fresh copy per test, so a test may replace its chat template."""
    return copy.deepcopy(base_tokenizer)


def with_template(tokenizer: Any, template: str) -> Any:
    tokenizer.chat_template = template
    return tokenizer


# --- rendering ----------------------------------------------------------------------------------------


def test_plain_chat_renders_exactly_like_apply_chat_template(tokenizer: Any) -> None:
    renderer = ChatRenderer(tokenizer)
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]
    for gen in (True, False):
        expected = tokenizer.apply_chat_template(
            messages, add_generation_prompt=gen, tokenize=True, return_dict=False
        )
        assert renderer.render_ids(messages, add_generation_prompt=gen) == list(expected)
        assert renderer.render_text(messages, add_generation_prompt=gen) == tokenizer.apply_chat_template(
            messages, add_generation_prompt=gen, tokenize=False
        )


def test_smollm_template_ignores_tools_so_they_are_injected_into_the_system_prompt(tokenizer: Any) -> None:
    renderer = ChatRenderer(tokenizer)
    assert not renderer.supports_tools and renderer.tool_role_renders
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    text = renderer.render_text(messages, [WEATHER])
    assert text.startswith("<|im_start|>system\n# Tools\n\nYou may call one or more functions")
    assert json.dumps(WEATHER) in text and "<tool_call>" in text
    assert text.endswith("<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n")
    # With a system prompt, the tools follow it in the same system message.
    with_system = renderer.render_text([{"role": "system", "content": "Be brief."}, *messages], [WEATHER])
    assert with_system.startswith("<|im_start|>system\nBe brief.\n\n# Tools\n")
    assert with_system.count("<|im_start|>system") == 1
    # The ids are the text's tokens, with no second BOS / <|im_start|> added in front.
    ids = renderer.render_ids(messages, [WEATHER])
    assert ids == tokenizer.encode(text, add_special_tokens=False)
    assert ids[:2] != [tokenizer.bos_token_id] * 2
    # No tools → exactly the template's own rendering (its default system prompt included).
    assert renderer.render_text(messages) == tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=False
    )


def test_tool_calls_and_results_are_rendered_as_hermes_text(tokenizer: Any) -> None:
    renderer = ChatRenderer(tokenizer)
    text = renderer.render_text(TOOL_CONVERSATION, [WEATHER])
    call_text = format_tool_call_text("get_weather", '{"city": "Paris"}')
    assert f"<|im_start|>assistant\n{call_text}<|im_end|>\n" in text
    assert '<|im_start|>tool\n<tool_response>\n{"temp_c": 18}\n</tool_response><|im_end|>\n' in text
    assert text.endswith("</tool_response><|im_end|>\n<|im_start|>assistant\n")
    # Content and calls together: content first, each call on its own lines.
    both = {**TOOL_CONVERSATION[1], "content": "Checking."}
    assert renderer.assistant_text(both) == f"Checking.\n{call_text}"
    assert f"<|im_start|>assistant\nChecking.\n{call_text}<|im_end|>" in renderer.render_text(
        [TOOL_CONVERSATION[0], both, TOOL_CONVERSATION[2]]
    )
    # What the renderer writes is what the parser reads back.
    parsed = HermesToolParser(id_seed=0).parse(renderer.assistant_text(both))
    assert parsed.content == "Checking."
    [call] = parsed.tool_calls
    assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Paris"})


def test_native_tool_template_is_detected_and_given_tools_and_calls(tokenizer: Any) -> None:
    renderer = ChatRenderer(with_template(tokenizer, QWEN_LIKE))
    assert renderer.supports_tools
    text = renderer.render_text(TOOL_CONVERSATION, [WEATHER])
    assert text.startswith("<|im_start|>system\n# Tools\n<tools>\n")
    assert "You may call one or more functions" not in text, "native templates get no injected prompt"
    # OpenAI's JSON-text arguments reach the template as a dict, so they are not JSON-encoded twice.
    assert '{"name": "get_weather", "arguments": {"city": "Paris"}}' in text
    assert text.count("<tool_response>") == 2


def test_template_without_a_tool_role_gets_tool_results_as_one_user_message(tokenizer: Any) -> None:
    renderer = ChatRenderer(with_template(tokenizer, NO_TOOL_ROLE))
    assert not renderer.tool_role_renders and not renderer.supports_tools
    text = renderer.render_text(TOOL_CONVERSATION, [WEATHER])
    assert "<|im_start|>tool" not in text
    assert (
        '<|im_start|>user\n<tool_response>\n{"temp_c": 18}\n</tool_response>\n'
        '<tool_response>\n{"temp_c": 19}\n</tool_response><|im_end|>\n<|im_start|>assistant\n'
    ) in text


def test_bad_input_is_refused_with_the_fix(tokenizer: Any) -> None:
    with pytest.raises(ValueError, match="unknown tool_format 'xml': use one of hermes"):
        ChatRenderer(tokenizer, tool_format="xml")
    renderer = ChatRenderer(tokenizer)
    with pytest.raises(TypeError, match=r"messages\[0\] must be an OpenAI chat message"):
        renderer.render_ids([{"content": "no role"}])
    with pytest.raises(ValueError, match=r"tool_calls\[0\] is not an OpenAI tool call"):
        renderer.render_ids([{"role": "assistant", "content": "", "tool_calls": [{"function": {}}]}])
    text_parts = [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]
    parts = [{"role": "user", "content": text_parts}]
    assert renderer.render_ids(parts) == renderer.render_ids([{"role": "user", "content": "Hi there"}])
    with pytest.raises(TemplateRenderError, match="could not render"):
        ChatRenderer(with_template(tokenizer, NO_TOOL_ROLE)).render_ids([{"role": "critic", "content": "x"}])
    tokenizer.chat_template = None
    with pytest.raises(ValueError, match="has no chat template"):
        ChatRenderer(tokenizer)


# --- the drift check -------------------------------------------------------------------------------------


def drifting(report: chat_template.TemplateReport) -> set[tuple[str, int]]:
    return {(case.conversation, case.turn) for case in report.cases if not case.ok}


def test_smollm_template_only_drifts_on_leading_whitespace(tokenizer: Any) -> None:
    report = check_template(tokenizer)
    assert not report.supports_tools and report.tool_role_renders
    # The generation prompt ends in "\n"; content starting with "  " or "\n\n" merges with it when the
    # next prompt is tokenized in one piece. Everything else, tool calls included, is drift-free.
    assert drifting(report) == {(WHITESPACE, 2), (WHITESPACE, 4)}
    for case in report.cases:
        if not case.ok:
            assert case.tokens_before_completion == 1 and case.sampled and case.rerendered
            assert case.sampled[0] != case.rerendered[0]
    assert not report.ok
    text = report.format()
    assert "ok     plain multi-turn, turn 1" in text
    assert "DRIFT  whitespace in content, turn 2" in text
    assert "Drift in 2 of 18 assistant turns (whitespace in content)" in text


def test_native_tool_template_passes_the_tool_turns(tokenizer: Any) -> None:
    report = check_template(with_template(tokenizer, QWEN_LIKE))
    assert report.supports_tools
    assert drifting(report) == {(WHITESPACE, 2), (WHITESPACE, 4)}
    assert sum(case.conversation.startswith("tool calls") for case in report.cases) == 5


def test_tool_results_as_user_messages_pass_too(tokenizer: Any) -> None:
    report = check_template(with_template(tokenizer, NO_TOOL_ROLE))
    assert not report.tool_role_renders
    assert drifting(report) == {(WHITESPACE, 2), (WHITESPACE, 4)}


def test_trimming_template_drifts_inside_the_completion(tokenizer: Any) -> None:
    report = check_template(with_template(tokenizer, TRIMMING))
    bad = {case.turn: case for case in report.cases if not case.ok and case.conversation == WHITESPACE}
    trailing_space = bad[5]  # "a trailing space ": the template drops the space the model sampled
    assert trailing_space.tokens_before_completion is not None and trailing_space.tokens_before_completion < 0
    assert "in the sampled completion" in report.format()


def test_a_template_error_is_reported_per_turn(tokenizer: Any) -> None:
    refuses_paris = (
        "{% for message in messages %}{% if 'Paris' in message['content'] %}{{ raise_exception('no Paris') }}"
        "{% endif %}" + _CHATML_TURN + "{% endfor %}" + _GEN_PROMPT
    )
    report = check_template(with_template(tokenizer, refuses_paris))
    errors = [case for case in report.cases if case.error]
    assert errors and all(case.conversation == "tool calls" for case in errors)
    assert "ERROR  tool calls, turn 1" in report.format() and "no Paris" in report.format()


# --- rllm check-template -----------------------------------------------------------------------------


def test_cli_reports_drift_on_the_tiny_model(tiny_model_dir: Path) -> None:
    rllm = Path(sys.executable).with_name("rllm")
    proc = subprocess.run(
        [rllm, "check-template", str(tiny_model_dir)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 1, proc.stderr
    assert f"Chat template check: {tiny_model_dir}" in proc.stdout
    assert "tools: ignored by the template; rllm injects hermes tool text" in proc.stdout
    assert "DRIFT  whitespace in content, turn 2" in proc.stdout


def test_cli_exits_0_without_drift(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delitem(chat_template.CHECK_CONVERSATIONS, WHITESPACE)
    assert main(["check-template", str(tiny_model_dir), "--tool-format", "hermes"]) == 0
    assert "No drift: all 11 assistant turns" in capsys.readouterr().out


def test_cli_bad_input_exits_2(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check-template", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert "rllm: error: model path" in err and "does not exist" in err
    # A model directory whose tokenizer has no chat template.
    no_template = tmp_path / "base_model"
    no_template.mkdir()
    shutil.copy(tiny_model_dir / "config.json", no_template / "config.json")
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    tokenizer.chat_template = None
    tokenizer.save_pretrained(no_template)
    assert main(["check-template", str(no_template)]) == 2
    captured = capsys.readouterr()
    assert "has no chat template" in captured.err and captured.out == ""
