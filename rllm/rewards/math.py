"""The math reward: read the final answer out of a response and grade it against the reference.

    from rllm.rewards.math import extract_answer, grade_answer, make_math_reward, math_reward

    extract_answer("<think>...</think> so the area is $\\boxed{\\frac12}$.")  # '\\frac12'
    grade_answer("\\frac12", "0.5")                                          # True
    math_reward({"task_id": "t1", "ground_truth": "1/2"}, response)           # Outcome: reward 1.0, correct

Equivalence is decided by math_verify (LaTeX and plain text to sympy, then string, numeric and symbolic
comparison) after a small normalisation of forms it does not read (``90°``, ``1.5e3``, ``1\\,000``,
``5 dollars``, a trailing period).

Numeric tolerance: math_verify matches a decimal with a number when both round to the same 6 decimal
places, and numeric expressions when their difference is 0 to 15 digits; we add that two numbers more
than 1e-3 apart, relatively, never match (without it 6 decimal places call ``1e-8`` and ``2e-8`` equal,
and the 15-digit check ``1.6e-19`` and ``3.2e-19``). ``0.333333`` is ``1/3``; ``0.33`` is not. Integers
and fractions against each other are compared exactly, symbolic forms by sympy's simplification.

Time bound: grading can explode (``2^{2^{2^{100}}}``, ``(10^{10})!``), so each ``grade_answer`` call as a
whole (parsing both sides and every comparison) is bounded by ``timeout_s``; a timeout counts as wrong.
``rllm.rewards._bounded`` enforces it: an ``ITIMER_REAL`` alarm on the main thread (restoring any alarm the
caller had set), a pool of warm worker processes, killed when late, off it; sympy's first-use imports
(``_warm_up``) happen once per process, before any deadline.
"""

from __future__ import annotations

import functools
import logging
import math
import re
from collections.abc import Sequence
from typing import Any, NamedTuple

import math_verify.grader
import math_verify.parser
import sympy
from math_verify import LatexExtractionConfig, parse, verify

from rllm.rewards._bounded import WorkerFailed, call_bounded
from rllm.rewards.text import strip_thinking
from rllm.rewards.types import RewardFn
from rllm.types import Outcome

logger = logging.getLogger(__name__)

# We bound time ourselves (module docstring) and call math_verify with its signal timeouts off; this
# silences its once-per-process warning that they are off.
math_verify.grader.TIMEOUT_WARNING_SHOWN = True
math_verify.parser.TIMEOUT_WARNING_SHOWN = True

_MAX_ANSWER_CHARS = 1000  # longer "answers" are not graded: no final answer is that long
_REL_TOL = 1e-3

# --- Extraction -------------------------------------------------------------------------------------


class _Found(NamedTuple):
    answer: str | None
    source: str | None  # "boxed", "answer_line", "gsm8k", "last_number"
    reason: str | None  # when there is no answer: "no_answer", "unclosed_think"


_BOX = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
# What may separate boxes that together state one answer: "\boxed{1}, \boxed{2}", "$\boxed{1}$ or $\boxed{2}$"
_LIST_GAP = re.compile(r"[\s$,;]*(?:(?:and|or|\\text\{\s*(?:and|or)\s*\}|\\q?quad)[\s$,;]*)?")
_ANSWER_MARK = re.compile(r"\banswer\b[ \t]*(?:is\b[ \t]*:?|:)", re.IGNORECASE)
_GSM8K_MARK = re.compile(r"####")
_NUMBER = re.compile(r"(?<![\w.])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")
_MATH_SPANS = (("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)"), ("$", "$"))
_SENTENCE_END = re.compile(r"\.(?:\s|$)")


def extract_answer(text: str) -> str | None:
    """The final answer stated in a response, as written, or None.

    Read only after ``</think>`` (an unclosed ``<think>`` means no answer), from the first of: the last
    ``\\boxed{...}`` / ``\\fbox{...}`` (boxes separated only by commas, "and" or "or" form one answer,
    ``"1, 2"``); the last "Answer: X" / "The answer is X" / "final answer is X"; GSM8K's last ``#### X``;
    the last number.
    """
    return _extract(text).answer


def _extract(response: str) -> _Found:
    text = strip_thinking(response)
    if text is None:
        return _Found(None, None, "unclosed_think")
    boxed = _last_boxed(text)
    if boxed is not None:
        return _Found(boxed, "boxed", None)
    for source, mark in (("answer_line", _ANSWER_MARK), ("gsm8k", _GSM8K_MARK)):
        marks = list(mark.finditer(text))
        answer = _clean_tail(text[marks[-1].end() :].split("\n", 1)[0]) if marks else ""
        if answer:
            return _Found(answer, source, None)
    numbers = _NUMBER.findall(text)
    if numbers:
        return _Found(numbers[-1], "last_number", None)
    return _Found(None, None, "no_answer")


def _last_boxed(text: str) -> str | None:
    pairs = _brace_pairs(text) if _BOX.search(text) else {}
    boxes = [box for match in _BOX.finditer(text) if (box := _read_box(match, pairs)) is not None]
    if not boxes:
        return None
    start, _, content = boxes[-1]
    contents = [content]
    for prev_start, prev_end, prev_content in reversed(boxes[:-1]):
        if not _LIST_GAP.fullmatch(text, prev_end, start):
            break
        contents.insert(0, prev_content)
        start = prev_start
    return ", ".join(dict.fromkeys(contents))  # "\boxed{5} \boxed{5}" is one answer, 5


_BRACE_TOKEN = re.compile(r"\\.|[{}]", re.DOTALL)


def _brace_pairs(text: str) -> dict[int, int]:
    """The position of each ``{`` in ``text`` mapped to that of its ``}`` (one pass; ``\\{`` and ``\\}``
    are characters, not groups)."""
    pairs: dict[int, int] = {}
    opened: list[int] = []
    for token in _BRACE_TOKEN.finditer(text):
        if token.group() == "{":
            opened.append(token.start())
        elif token.group() == "}" and opened:
            pairs[opened.pop()] = token.start()
    return pairs


def _read_box(match: re.Match[str], pairs: dict[int, int]) -> tuple[int, int, str] | None:
    """(start, end, content) of the box whose command ``match`` found; None if empty or never closed."""
    text, pos = match.string, match.end()
    while pos < len(text) and text[pos] in " \t":
        pos += 1
    if pos < len(text) and text[pos] == "{":
        close = pairs.get(pos, pos)  # never closed: no content
        content = text[pos + 1 : close].strip()
        return (match.start(), close + 1, content) if content else None
    # "\boxed 5": the rest of the word
    end = pos
    while end < len(text) and not text[end].isspace() and text[end] != "$":
        end += 1
    content = text[pos:end].rstrip(".,;")
    return (match.start(), end, content) if content else None


def _clean_tail(tail: str) -> str:
    """The answer in what follows "Answer:" on its line: a math span if it starts with one, else the
    text up to the end of the sentence."""
    tail = tail.strip().strip("*").strip()
    for left, right in _MATH_SPANS:
        if tail.startswith(left):
            end = tail.find(right, len(left))
            if end > len(left):
                return tail[len(left) : end].strip()
    end = _SENTENCE_END.search(tail)
    return (tail[: end.start()] if end else tail).strip().rstrip(".").strip()


# --- Grading ----------------------------------------------------------------------------------------


def grade_answer(prediction: str, ground_truth: str, *, timeout_s: float = 5.0) -> bool:
    """True when ``prediction`` is mathematically the same answer as ``ground_truth`` (see the module
    docstring for forms, tolerance and time bound). Never raises on a bad prediction: an empty,
    over-long, unparsable or too slow one is False."""
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s}")
    return _grade(prediction, (str(ground_truth),), timeout_s) == "correct"


def _grade(prediction: str, ground_truths: Sequence[str], timeout_s: float) -> str:
    """ "correct", "wrong", "too_long", "timeout" or "grader_error"."""
    if not prediction.strip():
        return "wrong"
    if len(prediction) > _MAX_ANSWER_CHARS:
        return "too_long"
    try:
        return call_bounded(_compare, (prediction, list(ground_truths)), timeout_s, warm_up=_warm_up)
    except TimeoutError:
        return "timeout"
    except WorkerFailed as error:
        logger.warning("math grading worker failed (%s); the answer counts as wrong", error)
        return "grader_error"


@functools.cache
def _warm_up() -> None:
    """sympy imports much of itself on first use (about 1.5 s): pay that once, outside any deadline, or
    a process's first correct answer could time out on a busy machine."""
    for prediction, truth in [
        ("x^2+2x+1", "(x+1)^2"),
        ("\\sqrt{3}", "1.7320508"),
        ("x > 1", "(1, \\infty)"),
        ("\\{1,2\\}", "(1,2)"),
        ("50\\%", "0.5"),
    ]:
        _compare(prediction, (truth,))


def _compare(prediction: str, ground_truths: Sequence[str]) -> str:
    try:
        predicted = _parse(prediction)
        for truth in ground_truths:
            for gold in _parse(truth):
                for pred in predicted:
                    if _verify(gold, pred):
                        return "correct"
        return "wrong"
    except Exception:
        logger.warning("math grading failed on %.200r; counted as wrong", prediction, exc_info=True)
        return "grader_error"


def _verify(gold: Any, pred: Any) -> bool:
    same = verify(
        gold, pred, float_rounding=6, strict=True, allow_set_relation_comp=True, timeout_seconds=None
    )
    if not same or not isinstance(gold, sympy.Basic) or not isinstance(pred, sympy.Basic):
        return same
    gold_values, pred_values = _real_values(gold), _real_values(pred)
    if not gold_values or not pred_values:
        return True  # not plain numbers: math_verify's verdict stands
    return any(abs(g - p) <= _REL_TOL * max(abs(g), abs(p)) for g in gold_values for p in pred_values)


_PERCENT = sympy.UnevaluatedExpr(sympy.Rational(1, 100))


def _real_values(expr: sympy.Basic) -> list[sympy.Float]:
    """The finite real values ``expr`` may stand for (``50%`` may mean 0.5 or 50), or [] when it is not
    a plain number (a set, a relation, an expression in symbols, complex, infinite)."""
    if isinstance(expr, sympy.Eq):  # "x = 0.5" is graded as 0.5
        expr = expr.rhs
    if not isinstance(expr, sympy.Expr) or not expr.is_number:
        return []
    forms = [expr]
    if isinstance(expr, sympy.Mul) and _PERCENT in expr.args:
        forms.append(sympy.Mul(*(arg for arg in expr.args if arg != _PERCENT)))
    values = [form.doit().evalf(30) for form in forms]
    return [value for value in values if isinstance(value, sympy.Float) and value.is_finite]


_LATEX_ONLY = [LatexExtractionConfig(boxed_match_priority=0)]
_UNICODE = {
    "−": "-",
    "×": "\\times ",
    "÷": "\\div ",
    "·": "\\cdot ",
    "π": "\\pi ",
    "∞": "\\infty ",
    "√": "\\sqrt ",
    "°": "^\\circ",
    "≤": "\\le ",
    "≥": "\\ge ",
    "€": "",
    "£": "",
    "¥": "",
    "₹": "",
}
_SCIENTIFIC = re.compile(r"(-?\d+(?:\.\d+)?)\s*[eE]\s*([+-]?\d+)")
_GROUP_SPACE = re.compile(r"(?<=\d)(?:\\,|\\!|\\ |\\thinspace|\u2009|\u202f)(?=\d{3}(?!\d))")
_PLAIN_CONSTANTS = re.compile(r"(?<![\\A-Za-z])(pi|infty)(?![A-Za-z])")  # "2 pi"
_PLAIN_SQRT = re.compile(r"(?<![\\A-Za-z])sqrt\(([^()]*)\)")  # "sqrt(2)"
_PERCENT_WORD = re.compile(r"(?<=\d)\s*(?:percent|per cent)\b", re.IGNORECASE)
_UNIT_WORDS = re.compile(
    r"(.*?\d(?:\s*\\?%)?)\s*(?:\\(?:text|textrm|mathrm|mbox)\s*\{\s*([A-Za-z][A-Za-z .]*)\}|\s([A-Za-z][A-Za-z .]*))"
)
# Words after a number that are mathematics, not a unit ("5 or six", "2 pi")
_NOT_UNITS = frozenset(
    {"or", "and", "pi", "inf", "infinity", "sqrt", "mod", "times", "plus", "minus", "over", "to"}
)


@functools.lru_cache(maxsize=4096)
def _parse(answer: str) -> tuple[Any, ...]:
    """math_verify's reading of one answer: the sympy object, and/or its normalised string."""
    return tuple(parse(f"\\boxed{{{_normalize(answer)}}}", _LATEX_ONLY, parsing_timeout=None))


def _normalize(answer: str) -> str:
    """Rewrite the forms math_verify misreads into ones it reads; the answer's meaning is unchanged."""
    text = answer.strip()
    for left, right in _MATH_SPANS:
        if text.startswith(left) and text.endswith(right) and len(text) >= len(left) + len(right):
            text = text[len(left) : len(text) - len(right)].strip()
            break
    for old, new in _UNICODE.items():
        text = text.replace(old, new)
    text = text.strip().strip("*").rstrip(".").strip()  # markdown bold, a full stop
    text = _GROUP_SPACE.sub("", text)
    text = _PERCENT_WORD.sub("\\%", text)
    text = _PLAIN_CONSTANTS.sub(r"\\\1 ", text)
    text = _PLAIN_SQRT.sub(r"\\sqrt{\1}", text).replace("**", "^")  # plain-text and Python notation
    if match := _SCIENTIFIC.fullmatch(text):
        text = f"{match[1]}\\times10^{{{match[2]}}}"
    if match := _UNIT_WORDS.fullmatch(text):
        words = (match[2] or match[3]).replace(".", " ").lower().split()
        if words and all(len(word) > 1 and word not in _NOT_UNITS for word in words):
            text = match[1]
    return text


# --- Reward -----------------------------------------------------------------------------------------


def make_math_reward(
    *, format_reward: float = 0.0, require_boxed: bool = False, timeout_s: float = 5.0
) -> RewardFn:
    """A math reward function: 1.0 for a correct final answer; ``format_reward`` for a wrong one that is
    well formed (in ``\\boxed{}``, after a closed think block if any); else 0.0. With ``require_boxed`` an
    answer that is not boxed scores 0 whatever it says. Rewards lie in [0, 1], as countdown's do; the
    registered ``math`` uses ``format_reward=0``, so its reward is the accuracy.

    ``info``: ``extracted`` (the answer as written, or None), ``source`` (where it was found: "boxed",
    "answer_line", "gsm8k", "last_number"), ``format_ok`` and ``reason``: "correct", "wrong",
    "no_answer", "unclosed_think", "not_boxed", "timeout", "too_long" (over 1,000 characters) or
    "grader_error".
    """
    if not 0.0 <= format_reward < 1.0:
        raise ValueError(f"format_reward must be in [0, 1), got {format_reward}")
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s}")

    def reward(task: dict[str, Any], response: str) -> Outcome:
        ground_truths = _ground_truths(task)
        found = _extract(response if isinstance(response, str) else "")
        format_ok = found.source == "boxed"
        if found.answer is None:
            reason = found.reason or "no_answer"
        elif require_boxed and not format_ok:
            reason = "not_boxed"
        else:
            reason = _grade(found.answer, ground_truths, timeout_s)
        correct = reason == "correct"
        return Outcome(
            reward=1.0 if correct else format_reward if format_ok else 0.0,
            is_correct=correct,
            info={
                "extracted": found.answer,
                "source": found.source,
                "format_ok": format_ok,
                "reason": reason,
            },
        )

    reward.__name__ = reward.__qualname__ = "math_reward"  # what an episode's error names, if it raises
    return reward


def _ground_truths(task: dict[str, Any]) -> tuple[str, ...]:
    """The accepted reference answers of a task, as strings; ValueError if there is none."""
    truths = usable_ground_truths(task.get("ground_truth"))
    if not truths:
        raise ValueError(f"math task {task.get('task_id', '?')!r}: {ground_truth_problem(task)}")
    return truths


def usable_ground_truths(truth: Any) -> tuple[str, ...]:
    """The reference answers in ``truth`` that can be graded, as strings: a non-empty string or a finite
    number, or the entries of a list that are one (``["", "42"]`` grades against ``"42"``)."""
    items = truth if isinstance(truth, (list, tuple)) else [truth]
    return tuple(text for item in items if (text := _reference_text(item)) is not None)


def ground_truth_problem(task: dict[str, Any]) -> str | None:
    """Why the math reward cannot grade ``task`` (None when it can): its ``ground_truth`` holds no usable
    answer. The dataset registry asks this of every row when a math dataset is registered or loaded, so a
    bad row is refused there, not in the middle of a run."""
    truth = task.get("ground_truth")
    if usable_ground_truths(truth):
        return None
    return (
        f"ground_truth {truth!r:.80} holds no usable answer: give the reference answer as a non-empty string, "
        "a number, or a list with at least one of them (any one accepted)"
    )


def _reference_text(item: Any) -> str | None:
    if isinstance(item, int) and not isinstance(item, bool):
        return str(item)
    if isinstance(item, float) and math.isfinite(item):
        return repr(item)
    return item if isinstance(item, str) and item.strip() else None


math_reward: RewardFn = make_math_reward()
"""The registered ``math`` reward: 1.0 for a correct final answer, 0.0 otherwise (``make_math_reward()``)."""
