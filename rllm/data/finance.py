"""The built-in ``finance`` task: FinQA-style questions over the fictional companies' financial tables of
``rllm.tools.finance_reports``, answered with the ``table_lookup`` and ``calculator`` tools and graded by
the ``finance_number`` reward.

Three kinds of question, each about one company:

- a value: "What was Alder Foods' revenue in 2023?" (one lookup);
- a change: "By how much did Alder Foods' net income change from 2022 to 2023?" (two lookups, one
  subtraction: the later year minus the earlier, negative for a fall);
- a share of revenue: "What percentage of revenue was Alder Foods' operating income in 2023?" (two lookups,
  one division; the answer is a percentage rounded to 2 decimals).

Held out means other companies: a company's split is a hash of its name (one in four is a test company),
so no test question, whatever the sizes or seed, is about a company the train split asks about.

The tool agent's system prompt and worked examples for the task (``SYSTEM_PROMPT``, ``finance_examples``)
are about a company that is in neither split.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import random
from typing import Any, NamedTuple

from rllm.tool_calls import solved_example
from rllm.tools.finance_reports import ITEMS, YEARS, financial_reports

_HELD_OUT_ONE_IN = 4
_TEST_SEED_OFFSET = 1_000_003

SYSTEM_PROMPT = (
    "You answer questions about companies' financial reports. Do not guess numbers: look each one up with "
    "the table_lookup tool, use the calculator tool for any arithmetic, then reply with only the final "
    "number."
)


class FinanceQuestion(NamedTuple):
    """One question with its answer; ``kind`` is value, change or percent."""

    company: str
    kind: str
    question: str
    answer: str


def _possessive(company: str) -> str:
    return f"{company}'" if company.endswith("s") else f"{company}'s"


def is_held_out(company: str) -> bool:
    """Whether ``company``'s questions belong to the test split (one company in four, by a hash of its name)."""
    return hashlib.sha256(f"finance:{company}".encode()).digest()[0] % _HELD_OUT_ONE_IN == 0


def company_questions(company: str) -> list[FinanceQuestion]:
    """Every question the task asks about ``company``, in a fixed order: 9 values, 6 changes, 6 shares."""
    rows = financial_reports()[company]
    who = _possessive(company)
    out = [
        FinanceQuestion(company, "value", f"What was {who} {item} in {year}?", str(int(rows[item][year])))
        for item in ITEMS
        for year in YEARS
    ]
    for item in ITEMS:
        for earlier, later in itertools.pairwise(YEARS):
            change = int(rows[item][later] - rows[item][earlier])
            question = f"By how much did {who} {item} change from {earlier} to {later}?"
            out.append(FinanceQuestion(company, "change", question, str(change)))
    for item in ITEMS[1:]:
        for year in YEARS:
            share = 100 * rows[item][year] / rows["revenue"][year]
            question = f"What percentage of revenue was {who} {item} in {year}?"
            out.append(FinanceQuestion(company, "percent", question, f"{share:.2f}%"))
    return out


@functools.cache
def split_questions(split: str) -> tuple[FinanceQuestion, ...]:
    """Every question of ``split`` ("train" or "test"), company by company."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', not {split!r}")
    held_out = split == "test"
    return tuple(q for c in financial_reports() if is_held_out(c) == held_out for q in company_questions(c))


def finance_tasks(split: str, size: int, seed: int = 0) -> list[dict[str, Any]]:
    """``size`` tasks of ``split``: the test split is ``size`` distinct held-out questions (all of them when
    it has fewer), the train split draws with repeats (a run takes more than the 546 train questions)."""
    if size < 0:
        raise ValueError(f"size must be >= 0, got {size}")
    questions = split_questions(split)
    if split == "test":
        rng = random.Random(seed + _TEST_SEED_OFFSET)
        picked = rng.sample(questions, min(size, len(questions)))
    else:
        rng = random.Random(seed)
        picked = [rng.choice(questions) for _ in range(size)]
    return [
        {
            "task_id": f"finance-{split}-{i}",
            "question": q.question,
            "ground_truth": q.answer,
            "data_source": "builtin/finance",
            "metadata": {"company": q.company, "kind": q.kind},
        }
        for i, q in enumerate(picked)
    ]


def finance_examples() -> list[dict[str, Any]]:
    """Worked examples for the tool agent, about "Juniper Tools" (in no split): a value (one lookup), a
    change (two lookups in one turn, then the calculator) and a share of revenue (the same shape)."""
    company = "Juniper Tools"
    who = _possessive(company)

    def lookup(item: str, year: int, value: str) -> tuple[str, dict[str, Any], str]:
        return ("table_lookup", {"company": company, "item": item, "year": year}, value)

    return [
        *solved_example(
            f"What was {who} revenue in 2022?",
            [[lookup("revenue", 2022, "640")]],
            "640",
            id_prefix="call_ex1",
        ),
        *solved_example(
            f"By how much did {who} net income change from 2022 to 2023?",
            [
                [lookup("net income", 2022, "81"), lookup("net income", 2023, "95")],
                [("calculator", {"expression": "95 - 81"}, "14")],
            ],
            "14",
            id_prefix="call_ex2",
        ),
        *solved_example(
            f"What percentage of revenue was {who} operating income in 2023?",
            [
                [lookup("operating income", 2023, "96"), lookup("revenue", 2023, "712")],
                [("calculator", {"expression": "96 / 712 * 100"}, "13.4831460674")],
            ],
            "13.48",
            id_prefix="call_ex3",
        ),
    ]
