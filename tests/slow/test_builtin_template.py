"""`rllm check-template` on the built-in model's own chat template (needs the converted smollm2-135m)."""

from __future__ import annotations

import pytest

from rllm.cli.main import main

pytestmark = pytest.mark.slow


def test_check_template_on_the_builtin_model(capsys: pytest.CaptureFixture[str]) -> None:
    from transformers import AutoTokenizer

    from rllm.inference.chat_template import check_template
    from rllm.models import resolve_model

    report = check_template(AutoTokenizer.from_pretrained(resolve_model("smollm2-135m")))
    assert (
        not report.supports_tools
    )  # ChatML ignores `tools`: the gateway describes them in the system prompt
    drifted = [c for c in report.cases if not c.ok]
    # Plain multi-turn, system prompts, tool calls/results and unicode re-render exactly; only replies that
    # begin with two whitespace characters merge with the generation prompt's trailing newline.
    assert 0 < len(drifted) < len(report.cases) // 4
    assert all(c.tokens_before_completion == 1 for c in drifted)
    assert main(["check-template", "smollm2-135m"]) == 1
    assert "drift" in capsys.readouterr().out.lower()
