"""Rows and replies: the shape of a catalog fixture, and helpers to write replies."""

from __future__ import annotations

import base64
import json
import pickle
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Reply = str | Callable[[dict[str, Any]], str]


@dataclass(frozen=True)
class Row:
    hub_row: dict[str, Any]
    right: Reply
    wrong: Reply


def py(code: str) -> str:
    return f"Here is my solution.\n```python\n{code}```"


def lcb_private(tests: list[dict[str, str]]) -> str:
    """LiveCodeBench's encoding of private tests: base64 of zlib of a pickled JSON string."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode()


def letter_of(text: str) -> Callable[[dict[str, Any]], str]:
    """A reply naming the letter at which the conversion put the option ``text``."""
    return lambda task: f"The answer is ({'ABCDEFGHIJ'[task['metadata']['choices'].index(text)]})."


def letter_not(text: str) -> Callable[[dict[str, Any]], str]:
    """A reply naming some other option than ``text``."""

    def reply(task: dict[str, Any]) -> str:
        wrong = next(i for i, c in enumerate(task["metadata"]["choices"]) if c != text)
        return f"The answer is ({'ABCDEFGHIJ'[wrong]})."

    return reply
