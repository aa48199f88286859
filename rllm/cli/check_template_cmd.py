"""``rllm check-template``: does a model's chat template drift across turns?

    rllm check-template smollm2-135m [--tool-format hermes]   a built-in name, a directory or a hub id

Renders a fixed set of conversations (plain multi-turn, a system prompt, tool calls and results,
whitespace and unicode in content) and checks, for every assistant turn, that the prompt plus the
sampled completion is a token prefix of the next prompt. Exit code: 0 no drift, 1 drift found, 2 the
model or its tokenizer could not be used. See docs/chat_templates.md.
"""

from __future__ import annotations

import argparse
import sys

from rllm.inference.chat_template import TOOL_FORMATS, check_template
from rllm.models import ModelNotFoundError, ModelPullError, resolve_model


def add_check_template_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``rllm check-template`` on the top-level CLI's ``subparsers``; return the new parser."""
    parser = subparsers.add_parser(
        "check-template",
        help="check that a model's chat template renders multi-turn history without token drift",
        description="Render fixed conversations with the model's chat template and check, for every "
        "assistant turn, that prompt + sampled completion is an exact token prefix of the next prompt "
        "(needed to merge an agent's calls into one training sequence). Exit 0: no drift; 1: drift; "
        "2: the model could not be loaded.",
    )
    parser.add_argument("model", help="built-in model name (smollm2-135m), model directory, or hub id")
    parser.add_argument(
        "--tool-format",
        choices=TOOL_FORMATS,
        default="hermes",
        help="how tool calls are written when the template ignores tools (default: hermes)",
    )
    parser.set_defaults(func=run_check_template)
    return parser


def run_check_template(args: argparse.Namespace) -> int:
    """Load ``args.model``'s tokenizer, print the drift report, return 0 (no drift), 1 (drift) or 2."""
    from transformers import AutoTokenizer

    try:
        path = resolve_model(args.model)
        tokenizer = AutoTokenizer.from_pretrained(path)
        report = check_template(tokenizer, tool_format=args.tool_format)
    except (ModelNotFoundError, ModelPullError, ValueError) as err:
        print(f"rllm: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # transformers: not a tokenizer directory, or a hub id it cannot fetch
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        print(f"rllm: error: cannot load a tokenizer from {args.model!r}: {first_line}", file=sys.stderr)
        return 2
    print(report.format())
    return 0 if report.ok else 1
