"""Small exact rewards for procedurally generated tasks."""

from __future__ import annotations

import re

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def extract_last_number(text: str) -> str | None:
    """The last number written in ``text`` (commas inside numbers ignored), or None."""
    found = _NUMBER.findall(text.replace(",", ""))
    return found[-1] if found else None


def number_match(text: str, answer: str | int | float) -> bool:
    """True when the last number in ``text`` equals ``answer`` numerically."""
    got = extract_last_number(text)
    if got is None:
        return False
    try:
        return float(got) == float(answer)
    except ValueError:
        return False
