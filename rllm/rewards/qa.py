"""Question-answering rewards: exact match and token F1 against reference answers, and multiple choice.

Free-form answers (``exact_match_reward``, ``f1_reward``) are read from the response by
``extract_answer``: the last ``<answer>...</answer>`` block if there is one, else the last line that starts
with "Answer:" / "Final answer:" / "The answer is", else the last non-empty line. A reply that reasons over
several lines and ends on its answer is therefore graded on that answer, not on its reasoning.

``task["ground_truth"]`` is a string, a number, or a list of aliases (any alias may match; F1 takes the
best). Comparison is on ``normalize_answer`` (SQuAD's: lowercase, drop punctuation and the articles
a/an/the, collapse whitespace).

Multiple choice (``multiple_choice_reward``): ``ground_truth`` is the correct letter, A-J (MMLU-Pro has ten
options), or the text of the correct option when ``task["metadata"]["choices"]`` lists the options in
order (A first). How the chosen letter is read from a reply is described at ``extract_choice``.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from typing import Any

from rllm.rewards.text import last_tagged, strip_thinking
from rllm.rewards.types import RewardFn
from rllm.types import Outcome

LETTERS = "ABCDEFGHIJ"
F1_CORRECT_THRESHOLD = 0.8
"""``f1_reward`` counts an answer correct at this token F1 (or on an exact match): "president barack
obama" for "Barack Obama" (F1 0.8) passes, "Obama" (F1 0.67) does not."""

# ------------------------------------------------------------------------------------ free-form answers

# Patterns here avoid two adjacent optional runs of the same characters (as in "\s*\**\s*"), which
# backtrack quadratically on long runs of spaces in degenerate model output.
_ANSWER_LINE = re.compile(
    r"^[^\S\n]*(?:[*_#>]+[^\S\n]*)?(?:the[^\S\n]+)?(?:final[^\S\n]+)?answer[*_]*"
    r"(?:[^\S\n]*[:：]|[^\S\n]+is\b)(?P<answer>[^\n]*)",
    re.IGNORECASE | re.MULTILINE,
)
_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(?:a|an|the)\b")


def extract_answer(text: str) -> str:
    """The answer a free-form reply gives (see the module docstring for the order tried); "" if none.

    An "Answer:" line with nothing after the colon takes the next non-empty line.
    """
    tagged = last_tagged(text, "answer")
    if tagged is not None:
        return tagged.strip()
    lines = list(_ANSWER_LINE.finditer(text))
    if lines:
        last = lines[-1]
        answer = last.group("answer").strip(" \t*_:")
        if answer:
            return answer
        rest = [line.strip() for line in text[last.end() :].splitlines() if line.strip()]
        return rest[0] if rest else ""
    nonempty = [line.strip() for line in text.splitlines() if line.strip()]
    return nonempty[-1] if nonempty else ""


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lowercase, drop punctuation (ASCII and Unicode), drop a/an/the, collapse spaces.

    Punctuation is deleted, not replaced by a space, as SQuAD does: "U.S." becomes "us", "don't" "dont".
    """
    text = text.lower()
    text = "".join(c for c in text if c not in _PUNCTUATION and not unicodedata.category(c).startswith("P"))
    return " ".join(_ARTICLES.sub(" ", text).split())


def token_f1(prediction: str, reference: str) -> float:
    """Token F1 of the normalised strings, as in SQuAD: with ``common`` the multiset intersection of tokens,
    precision ``P = common / len(pred)``, recall ``R = common / len(ref)``, ``F1 = 2PR / (P + R)``.
    When either side normalises to nothing, 1.0 if both do and 0.0 otherwise."""
    pred, ref = normalize_answer(prediction).split(), normalize_answer(reference).split()
    if not pred or not ref:
        return float(pred == ref)
    common = sum((Counter(pred) & Counter(ref)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def _task_id(task: dict[str, Any]) -> str:
    return repr(task.get("task_id", "?"))


def _references(task: dict[str, Any]) -> list[str]:
    if "ground_truth" not in task:
        raise ValueError(f"task {_task_id(task)} has no ground_truth")
    truth = task["ground_truth"]
    aliases = list(truth) if isinstance(truth, (list, tuple)) else [truth]
    if not aliases or not all(isinstance(a, (str, int, float)) and not isinstance(a, bool) for a in aliases):
        raise ValueError(
            f"task {_task_id(task)}: ground_truth must be a string, a number or a non-empty list of them, "
            f"got {truth!r}"
        )
    return [str(a) for a in aliases]


def _free_form_answer(response: str) -> tuple[str | None, dict[str, Any]]:
    """The extracted answer, or None with the info explaining why there is nothing to grade."""
    text = strip_thinking(response)
    if text is None:
        return None, {"reason": "unclosed_think"}
    answer = extract_answer(text)
    if not normalize_answer(answer):
        return None, {"answer": answer, "reason": "no_answer"}
    return answer, {"answer": answer}


def exact_match_reward(task: dict[str, Any], response: str) -> Outcome:
    """1.0 when the extracted answer equals a reference after ``normalize_answer``, else 0.0."""
    references = _references(task)
    answer, info = _free_form_answer(response)
    if answer is None:
        return Outcome(reward=0.0, is_correct=False, info=info)
    normalized = normalize_answer(answer)
    matched = next((ref for ref in references if normalize_answer(ref) == normalized), None)
    info.update(normalized=normalized, matched=matched)
    return Outcome(reward=float(matched is not None), is_correct=matched is not None, info=info)


def make_f1_reward(correct_threshold: float = F1_CORRECT_THRESHOLD) -> RewardFn:
    """A token-F1 reward: ``reward`` is the best F1 over the reference aliases; ``is_correct`` is an exact
    match or F1 >= ``correct_threshold``."""
    if not 0.0 < correct_threshold <= 1.0:
        raise ValueError(f"correct_threshold must be in (0, 1], got {correct_threshold}")

    def f1_reward(task: dict[str, Any], response: str) -> Outcome:
        references = _references(task)
        answer, info = _free_form_answer(response)
        if answer is None:
            return Outcome(reward=0.0, is_correct=False, info=info)
        scores = [token_f1(answer, ref) for ref in references]
        best = max(range(len(references)), key=scores.__getitem__)
        exact = any(normalize_answer(ref) == normalize_answer(answer) for ref in references)
        info.update(f1=scores[best], matched=references[best], exact_match=exact)
        # The tolerance keeps F1 values that are exactly the threshold on paper (4/5) from rounding below it.
        correct = exact or scores[best] >= correct_threshold - 1e-9
        return Outcome(reward=scores[best], is_correct=correct, info=info)

    return f1_reward


f1_reward = make_f1_reward()

# ----------------------------------------------------------------------------------- multiple choice

_LETTER = r"(?P<letter>[A-J])(?![A-Za-z0-9'’])"
# Where a reply says which option it picks: "answer is", "Answer:", "the best choice is", \boxed{...}.
_MARKER = re.compile(
    r"(?i:\b(?:answer|choice|option)\b[*_]*[^\S\n]*(?:(?:is|would be|should be|will be|must be)\b[^\S\n]*:?|[:=]))"
    r"|\\boxed\{"
)
# Between a marker and its letter: markup and a few filler words ("is clearly (B)", "is option **B**").
_LEAD = (
    r"(?:[^\S\n]|[*_`'\"(\[{$]|\\boxed\{|\\text(?:bf)?\{"
    r"|(?i:option|choice|letter|clearly|therefore|thus|probably|likely|definitely|most|then)\b)*"
)
_LETTER_AFTER_MARKER = re.compile(_LEAD + _LETTER)
_LOWERCASE_AFTER_MARKER = re.compile(
    r"[^\S\n]*(?:[*_(\[]+[^\S\n]*)?(?P<letter>[a-j])[^\S\n]*(?:[*_)\].]+[^\S\n]*)?(?=\n|\Z)"
)
# "I think B": the pronoun, not option I.
_PRONOUN_I = re.compile(r"I[^\S\n]+(?:think|believe|guess|would|am|feel|suspect|will)\b")
# A second letter right after the first: "A or B", "B, C", "A and/or D".
_ANOTHER_LETTER = re.compile(
    r"[)\]}*_.`'\"$]*[^\S\n]*(?:,|/|&|(?i:and/or|or|and)\b)[^\S\n]*"
    r"(?:[*_`'\"(\[{]|(?i:option|choice)[^\S\n]+)*[A-J](?![A-Za-z0-9'’])"
)
_IS_CORRECT = re.compile(
    r"(?<![A-Za-z0-9])\(?" + _LETTER + r"\)?[*_]*[^\S\n]+is[^\S\n]+(?:the[^\S\n]+)?(?:correct|right|best)\b"
)
# Without any marker, only letters set off as an option label count: "(B)", "**B**", a line "B" or
# "B) text", "option B". A bare capital in prose does not ("A good fit is ..." names no option).
_LABELLED = (
    re.compile(r"(?<![A-Za-z0-9])\(" + _LETTER + r"\)"),
    re.compile(r"\*\*\(?" + _LETTER + r"\)?[.:]?\*\*"),
    re.compile(r"^[^\S\n]*[*_]*(?P<letter>[A-J])(?:[).:]|[*_]*[^\S\n]*$)", re.MULTILINE),
    re.compile(r"^[^\S\n]*\(?(?P<letter>[a-j])\)?[.)]?[^\S\n]*$", re.MULTILINE),
    re.compile(r"(?i:\b(?:option|choice))[^\S\n]+" + _LETTER),
)
_LETTER_LIST = re.compile(
    r"(?<![A-Za-z0-9])\(?[A-J]\)?[^\S\n]*(?:,|/|&|\bor\b|\band\b)[^\S\n]*\(?[A-J]\)?(?![A-Za-z0-9'’])"
)


def _letter_after_marker(text: str, pos: int) -> tuple[str | None, bool]:
    """(letter, ambiguous) for the text just after an answer marker ending at ``pos``."""
    m = _LETTER_AFTER_MARKER.match(text, pos)
    if m is None:
        lower = _LOWERCASE_AFTER_MARKER.match(text, pos)
        return (lower.group("letter").upper(), False) if lower else (None, False)
    if m.group("letter") == "I" and _PRONOUN_I.match(text, m.start("letter")):
        return None, False
    return m.group("letter"), _ANOTHER_LETTER.match(text, m.end()) is not None


def extract_choice(text: str) -> tuple[str | None, str | None]:
    """The option letter a reply picks, as ``(letter, None)``, or ``(None, reason)``.

    1. An explicit statement, the last one in the reply winning: a letter right after "answer is",
       "Answer:", "the correct choice is", ``\\boxed{``, ... (markup such as ``(B)``/``**B**`` and fillers
       like "clearly" allowed in between), or "B is correct" / "(B) is the right ...". Letters are capitals;
       a lowercase one counts only when it is all that follows the marker ("Answer: b").
    2. Otherwise, letters set off as option labels anywhere: ``(B)``, ``**B**``, a line that is just the
       letter or starts "B)", "B." or "B:", "option B". They must all name the same option.

    A reply naming several options ("A or B", "Answer: B, C", labels of different options) is
    ``"ambiguous_choice"``; one naming none is ``"no_choice"``. Capital A in prose is an article, not a
    choice: "A good answer is C" picks C.
    """
    explicit: list[tuple[int, str | None, bool]] = []
    for m in _MARKER.finditer(text):
        letter, ambiguous = _letter_after_marker(text, m.end())
        explicit.append((m.end(), letter, ambiguous))
    explicit += [(m.start(), m.group("letter"), False) for m in _IS_CORRECT.finditer(text)]
    for _, letter, ambiguous in sorted(explicit, key=lambda item: item[0], reverse=True):
        if ambiguous:
            return None, "ambiguous_choice"
        if letter is not None:
            return letter, None
    labelled = {m.group("letter").upper() for pattern in _LABELLED for m in pattern.finditer(text)}
    if len(labelled) == 1:
        return labelled.pop(), None
    if len(labelled) > 1 or _LETTER_LIST.search(text):
        return None, "ambiguous_choice"
    return None, "no_choice"


def _choices(task: dict[str, Any]) -> list[str] | None:
    metadata = task.get("metadata") or {}
    choices = metadata.get("choices") if isinstance(metadata, dict) else None
    if choices is None:
        return None
    if (
        not isinstance(choices, (list, tuple))
        or not 2 <= len(choices) <= len(LETTERS)
        or not all(isinstance(c, str) for c in choices)
    ):
        raise ValueError(
            f"task {_task_id(task)}: metadata.choices must list 2 to {len(LETTERS)} option strings, got {choices!r}"
        )
    return list(choices)


def _expected_letter(task: dict[str, Any], choices: list[str] | None) -> str:
    """The correct letter: ``ground_truth`` itself when it is one letter, else the option it is the text of."""
    if "ground_truth" not in task:
        raise ValueError(f"task {_task_id(task)} has no ground_truth")
    truth = task["ground_truth"]
    valid = LETTERS[: len(choices)] if choices else LETTERS
    if not isinstance(truth, str):  # a dataset bug, which the reward interface reports as ValueError
        raise ValueError(  # noqa: TRY004
            f"task {_task_id(task)}: a multiple-choice ground_truth is a letter, got {truth!r}"
        )
    if len(truth.strip()) == 1 and truth.strip().upper() in valid:
        return truth.strip().upper()
    if choices:
        hits = [i for i, c in enumerate(choices) if c.strip() == truth.strip()]
        if not hits:
            hits = [i for i, c in enumerate(choices) if normalize_answer(c) == normalize_answer(truth)]
        if len(hits) == 1:
            return LETTERS[hits[0]]
        raise ValueError(
            f"task {_task_id(task)}: ground_truth {truth!r} is not a letter in {valid[0]}-{valid[-1]} and "
            f"matches {len(hits)} of metadata.choices (it must match exactly one)"
        )
    raise ValueError(
        f"task {_task_id(task)}: ground_truth {truth!r} is not a letter A-J; give the letter, or list the "
        "options in metadata.choices to give the option's text"
    )


def multiple_choice_reward(task: dict[str, Any], response: str) -> Outcome:
    """1.0 when the reply picks the correct option (see ``extract_choice``), else 0.0.

    When ``metadata.choices`` is given and the reply names no letter, an answer (``extract_answer``) that
    equals exactly one option's text after ``normalize_answer`` picks that option.
    """
    choices = _choices(task)
    expected = _expected_letter(task, choices)
    text = strip_thinking(response)
    if text is None:
        return Outcome(reward=0.0, is_correct=False, info={"expected": expected, "reason": "unclosed_think"})
    letter, reason = extract_choice(text)
    if letter is None and reason == "no_choice" and choices:
        answer = normalize_answer(extract_answer(text))
        hits = [i for i, c in enumerate(choices) if answer and normalize_answer(c) == answer]
        if len(hits) == 1:
            letter, reason = LETTERS[hits[0]], None
    info: dict[str, Any] = {"answer": letter, "expected": expected}
    if reason is not None:
        info["reason"] = reason
    elif choices and letter not in LETTERS[: len(choices)]:
        info["reason"] = "not_an_option"
    correct = letter == expected
    return Outcome(reward=float(correct), is_correct=correct, info=info)
