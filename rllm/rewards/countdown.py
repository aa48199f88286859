"""The Countdown game: combine the given numbers with + - * / to reach the target.

``task["ground_truth"]`` is ``{"target": int, "numbers": [int, ...]}``. Rules (TinyZero's convention):

- every given number is used exactly once (a number given twice may be used twice); no other numbers;
- operators ``+ - * /``, parentheses and unary minus; nothing else (no ``**``, ``//``, names, calls);
- arithmetic is exact (fractions): intermediate results may be fractions or negative, e.g.
  ``8 / (3 - 8 / 3) = 24``; only the final value must equal the target.

The equation is read from the last ``<answer>...</answer>`` block, else from the last line that contains
one, and may end in ``= <target>``. ``×``, ``÷``, ``\\times``, ``\\cdot`` and ``\\div`` are read as ``*`` and ``/``,
``$`` is dropped. The equation is parsed with ``ast`` and walked node by node; nothing is ever ``eval``-ed.

``countdown_tasks`` generates solvable tasks with disjoint train/test splits.
"""

from __future__ import annotations

import ast
import hashlib
import random
import re
from collections import Counter
from fractions import Fraction
from typing import Any

from rllm.rewards.text import last_tagged, strip_thinking
from rllm.rewards.types import RewardFn
from rllm.types import Outcome

MAX_EQUATION_CHARS = 300
"""Longer equations are rejected unparsed: a valid one is a few numbers long, and this bounds what ``ast``
is asked to parse (deeply nested parentheses can exhaust the parser)."""

_EQUATION_CHARS = re.compile(r"^[\d\s+\-*/().=]+$")
# A stretch of a line that looks like arithmetic: digits, operators, parentheses, "=" (trimmed in
# _arithmetic_runs to start at a digit or "(" and end at a digit or ")").
_EQUATION_RUN = re.compile(r"[\d\s+\-*/().=]+")
_OPERATORS = re.compile(r"[+\-*/]")
# Operator spellings read as their ASCII form, and LaTeX math delimiters dropped.
_SYMBOLS = {"×": "*", "÷": "/", "−": "-", "\\times": "*", "\\cdot": "*", "\\div": "/", "$": ""}
_BINARY_OPS = (ast.Add, ast.Sub, ast.Mult, ast.Div)


class _Rejected(Exception):
    """An equation outside the allowed grammar or arithmetic; ``reason`` goes into the reward info."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(detail or reason)
        self.reason, self.detail = reason, detail


def extract_equation(text: str) -> str | None:
    """The equation a reply gives: the last ``<answer>`` block's content, else the last arithmetic
    stretch (digits, operators, parentheses) on the last line that has one, else None."""
    for symbol, ascii_op in _SYMBOLS.items():
        text = text.replace(symbol, ascii_op)
    tagged = last_tagged(text, "answer")
    if tagged is not None:
        # A sentence-final period is not part of the equation ("2." would otherwise read as a float).
        return tagged.strip().rstrip(".").strip() or None
    for line in reversed(text.splitlines()):
        runs = [r for r in _arithmetic_runs(line) if _OPERATORS.search(r.split("=")[0])]
        if runs:
            return runs[-1]
    return None


def _arithmetic_runs(line: str) -> list[str]:
    runs = []
    for run in _EQUATION_RUN.findall(line):
        start = next((i for i, c in enumerate(run) if c.isdigit() or c == "("), len(run))
        end = next((i for i in range(len(run) - 1, -1, -1) if run[i].isdigit() or run[i] == ")"), -1)
        if end > start:
            runs.append(run[start : end + 1])
    return runs


def _collect_leaves(node: ast.AST, leaves: list[int]) -> None:
    """Collect the integer literals of an allowed expression; raise _Rejected on any other node."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, _BINARY_OPS):
        _collect_leaves(node.left, leaves)
        _collect_leaves(node.right, leaves)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        _collect_leaves(node.operand, leaves)
    elif isinstance(node, ast.Constant) and type(node.value) is int:
        leaves.append(node.value)
    else:
        raise _Rejected("disallowed_syntax", ast.dump(node)[:80])


def _evaluate(node: ast.AST) -> Fraction:
    """Exact value of an expression already checked by ``_collect_leaves``."""
    if isinstance(node, ast.Constant):
        return Fraction(node.value)
    if isinstance(node, ast.UnaryOp):
        return -_evaluate(node.operand)
    assert isinstance(node, ast.BinOp)
    left, right = _evaluate(node.left), _evaluate(node.right)
    if isinstance(node.op, ast.Add):
        return left + right
    if isinstance(node.op, ast.Sub):
        return left - right
    if isinstance(node.op, ast.Mult):
        return left * right
    if right == 0:
        raise _Rejected("division_by_zero")
    return left / right


def _parse_equation(equation: str) -> tuple[ast.expr, list[int], Fraction | None]:
    """The expression tree of ``equation``, the numbers it uses, and the number after its ``=`` (None
    without one). Raises ``_Rejected("disallowed_syntax")`` for anything but integers, ``+ - * /``,
    parentheses, unary minus and one trailing ``= <integer>``.
    """
    if len(equation) > MAX_EQUATION_CHARS:
        raise _Rejected("disallowed_syntax", f"longer than {MAX_EQUATION_CHARS} characters")
    if not _EQUATION_CHARS.match(equation):
        raise _Rejected("disallowed_syntax", "only digits, + - * /, parentheses and = are allowed")
    expression, *rhs = equation.split("=")
    claimed = None
    if rhs:
        if len(rhs) > 1 or not re.fullmatch(r"\s*-?\d+\s*", rhs[0]):
            raise _Rejected("disallowed_syntax", "only one '= <number>' may follow the expression")
        claimed = Fraction(int(rhs[0]))
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise _Rejected("disallowed_syntax", f"{type(exc).__name__}: {exc}"[:80]) from None
    leaves: list[int] = []
    _collect_leaves(tree.body, leaves)
    return tree.body, leaves, claimed


def _countdown_truth(task: dict[str, Any]) -> tuple[int, list[int]]:
    truth = task.get("ground_truth")
    ok = (
        isinstance(truth, dict)
        and type(truth.get("target")) is int
        and isinstance(truth.get("numbers"), list)
        and truth["numbers"]
        and all(type(n) is int and n >= 0 for n in truth["numbers"])
    )
    if not ok:
        raise ValueError(
            f"task {task.get('task_id', '?')!r}: countdown ground_truth must be "
            f"{{'target': int, 'numbers': [non-negative int, ...]}}, got {truth!r}"
        )
    return truth["target"], list(truth["numbers"])


def _rule_broken(leaves: list[int], numbers: list[int], target: int, claimed: Fraction | None) -> str | None:
    """Which rule an equation's numbers (or its "= n" suffix) break, checked before any arithmetic."""
    used, given = Counter(leaves), Counter(numbers)
    if used - given:
        return "number_not_given" if set(used) - set(given) else "number_reused"
    if given - used:
        return "number_unused"
    if claimed is not None and claimed != target:
        return "rhs_not_target"
    return None


def _fraction_json(value: Fraction) -> int | str:
    return int(value) if value.denominator == 1 else str(value)


def make_countdown_reward(format_reward: float = 0.0) -> RewardFn:
    """A Countdown reward: 1.0 for a correct equation, ``format_reward`` for one that parses under the
    allowed grammar but breaks the rules or misses the target, 0.0 when there is no parseable equation.

    TinyZero trains with ``format_reward=0.1``; the registered ``countdown`` reward uses 0.0, so its
    reward is the accuracy.
    """
    if not 0.0 <= format_reward < 1.0:
        raise ValueError(f"format_reward must be in [0, 1), got {format_reward}")

    def countdown_reward(task: dict[str, Any], response: str) -> Outcome:
        target, numbers = _countdown_truth(task)
        text = strip_thinking(response)
        if text is None:
            return Outcome(reward=0.0, is_correct=False, info={"reason": "unclosed_think"})
        equation = extract_equation(text)
        if equation is None:
            return Outcome(reward=0.0, is_correct=False, info={"reason": "no_equation"})
        info: dict[str, Any] = {"equation": equation}
        try:
            tree, leaves, claimed = _parse_equation(equation)
        except _Rejected as rejected:
            return Outcome(
                reward=0.0,
                is_correct=False,
                info={**info, "reason": rejected.reason, "detail": rejected.detail},
            )
        reason = _rule_broken(leaves, numbers, target, claimed)
        if reason is None:
            try:
                value = _evaluate(tree)
            except _Rejected as rejected:
                reason = rejected.reason
            else:
                info["value"] = _fraction_json(value)
                reason = None if value == target else "wrong_value"
        if reason is not None:
            return Outcome(reward=format_reward, is_correct=False, info={**info, "reason": reason})
        return Outcome(reward=1.0, is_correct=True, info=info)

    return countdown_reward


countdown_reward = make_countdown_reward()

# ---------------------------------------------------------------------------------------- generation


def _combine(a: tuple[Fraction, str], b: tuple[Fraction, str]) -> list[tuple[Fraction, str]]:
    (x, ex), (y, ey) = a, b
    out = [
        (x + y, f"({ex} + {ey})"),
        (x * y, f"({ex} * {ey})"),
        (x - y, f"({ex} - {ey})"),
        (y - x, f"({ey} - {ex})"),
    ]
    if y != 0:
        out.append((x / y, f"({ex} / {ey})"))
    if x != 0:
        out.append((y / x, f"({ey} / {ex})"))
    return out


def _strip_outer(expr: str) -> str:
    return expr[1:-1] if expr.startswith("(") and expr.endswith(")") else expr


def solve_countdown(numbers: list[int], target: int) -> str | None:
    """An equation using every one of ``numbers`` exactly once that equals ``target``, or None.

    Exhaustive search: repeatedly replace two of the remaining values by their sum, difference, product or
    quotient until one value is left. Fine for up to five or six numbers.
    """
    goal = Fraction(target)
    seen: set[tuple[Fraction, ...]] = set()

    def search(items: list[tuple[Fraction, str]]) -> str | None:
        if len(items) == 1:
            return _strip_outer(items[0][1]) if items[0][0] == goal else None
        key = tuple(sorted(v for v, _ in items))
        if key in seen:
            return None
        seen.add(key)
        for i in range(len(items)):
            for j in range(i + 1, len(items)):
                rest = items[:i] + items[i + 1 : j] + items[j + 1 :]
                for combined in _combine(items[i], items[j]):
                    found = search([*rest, combined])
                    if found is not None:
                        return found
        return None

    return search([(Fraction(n), str(n)) for n in numbers])


def _random_solution(numbers: list[int], rng: random.Random) -> tuple[Fraction, str]:
    """A random equation over all of ``numbers`` (random pairing order, random operator) and its value."""
    items = [(Fraction(n), str(n)) for n in numbers]
    while len(items) > 1:
        i, j = rng.sample(range(len(items)), 2)
        a, b = items[i], items[j]
        items = [item for k, item in enumerate(items) if k not in (i, j)]
        items.append(rng.choice(_combine(a, b)))
    return items[0][0], _strip_outer(items[0][1])


def _split_of(numbers: list[int], target: int) -> str:
    """A puzzle's split, from a hash of its content (order of the numbers ignored): 1 in 4 is test."""
    key = f"{target}:{','.join(map(str, sorted(numbers)))}"
    return "test" if hashlib.sha256(key.encode()).digest()[0] % 4 == 0 else "train"


_MAX_DRAWS_PER_TASK = 10_000


def countdown_tasks(
    split: str,
    n: int,
    *,
    seed: int = 0,
    n_numbers: tuple[int, ...] = (3, 4),
    max_number: int = 99,
    max_target: int = 100,
) -> list[dict[str, Any]]:
    """``n`` distinct solvable Countdown tasks for ``split`` ("train" or "test"), cycling through
    ``n_numbers`` numbers per task.

    Numbers are drawn uniformly from 1..``max_number`` (repeats allowed); the target is the value of a
    random equation over them, kept when it is an integer in 1..``max_target``, so every task has a
    solution (``metadata["solution"]``). A puzzle's split is a hash of its numbers and target, so no test
    puzzle is in any train set, whatever ``seed`` or ``n``.
    """
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    if not n_numbers or any(k < 2 for k in n_numbers):
        raise ValueError(f"n_numbers must list counts of at least 2, got {n_numbers!r}")
    if max_number < 1 or max_target < 1:
        raise ValueError(f"max_number and max_target must be positive, got {max_number}, {max_target}")
    rng = random.Random(f"countdown-tasks-{seed}")
    seen: set[tuple[int, tuple[int, ...]]] = set()
    tasks = []
    for i in range(n):
        k = n_numbers[i % len(n_numbers)]
        for _ in range(_MAX_DRAWS_PER_TASK):
            numbers = [rng.randint(1, max_number) for _ in range(k)]
            value, solution = _random_solution(numbers, rng)
            if value.denominator != 1 or not 1 <= value <= max_target:
                continue
            target = int(value)
            key = (target, tuple(sorted(numbers)))
            if key not in seen and _split_of(numbers, target) == split:
                break
        else:
            raise ValueError(
                f"found only {sum(len(found[1]) == k for found in seen)} distinct {split} tasks with {k} numbers; "
                "ask for fewer tasks or raise max_number / max_target"
            )
        seen.add(key)
        tasks.append(
            {
                "task_id": f"countdown-{split}-{target}-{'-'.join(map(str, numbers))}",
                "question": countdown_prompt(numbers, target),
                "ground_truth": {"target": target, "numbers": numbers},
                "data_source": "builtin/countdown",
                "metadata": {"solution": solution, "n_numbers": k},
            }
        )
    return tasks


def countdown_prompt(numbers: list[int], target: int) -> str:
    """The question of a Countdown task."""
    return (
        f"Using the numbers {numbers}, write an equation that equals {target}. Use each number exactly "
        "once, with + - * / and parentheses. Give only the final equation inside <answer></answer> tags, "
        "for example <answer>(1 + 2) * 3</answer>."
    )
