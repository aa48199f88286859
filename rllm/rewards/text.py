"""Text helpers shared by the reward functions."""

from __future__ import annotations

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


def strip_thinking(text: str) -> str | None:
    """The part of a response that is the answer: what follows the last ``</think>``, stripped.

    A response without think tags is returned stripped. A ``</think>`` without its ``<think>`` counts as
    closed, because chat templates such as Qwen3's put the opening tag in the prompt. ``None`` means the
    reasoning never ended (a ``<think>`` after the last ``</think>``, typically a response cut off at
    ``max_tokens``): there is no answer to grade, and a reward should score it 0 rather than read an
    answer out of unfinished reasoning.
    """
    _, closed, answer = text.rpartition(THINK_CLOSE)
    if THINK_OPEN in answer:
        return None
    return answer.strip() if closed else text.strip()


def last_tagged(text: str, tag: str) -> str | None:
    """The content of the last complete ``<tag>...</tag>`` in ``text`` (tags matched case-sensitively), or
    None when there is none. Linear in the length of ``text``, whatever it repeats."""
    close = text.rfind(f"</{tag}>")
    start = text.rfind(f"<{tag}>", 0, max(close, 0))
    if close < 0 or start < 0:
        return None
    return text[start + len(tag) + 2 : close]
