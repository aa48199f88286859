"""Every catalog entry, on a row in its hub dataset's column layout: the row converts to a valid task, and
the entry's reward gives 1.0 to a right reply and 0.0 to a wrong one (tests/data/catalog_rows/).

Parametrized over the whole catalog, so an entry added without a row fails here.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from rllm.data.catalog import CATALOG, FAMILIES, catalog_entry
from rllm.rewards.registry import get_reward, ground_truth_check, reward_names
from tests.data.catalog_rows import ROWS, Reply


def _reply(reply: Reply, task: dict[str, Any]) -> str:
    return reply(task) if callable(reply) else reply


def test_the_catalog_is_large_and_every_row_has_an_entry() -> None:
    assert len(CATALOG) >= 50
    assert set(ROWS) <= set(CATALOG), (
        f"rows for entries that do not exist: {sorted(set(ROWS) - set(CATALOG))}"
    )
    assert {entry.family for entry in CATALOG.values()} == set(FAMILIES)


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_entry_converts_its_hub_row_and_its_reward_grades_it(name: str) -> None:
    entry = catalog_entry(name)
    assert name in ROWS, f"add a row in {name}'s hub layout to tests/data/catalog_rows/"
    assert entry.reward in reward_names() and entry.license and entry.description
    fixture = ROWS[name]
    split = next(iter(entry.splits))
    task = entry.to_task(fixture.hub_row, split, 0)
    assert task is not None, f"{name}: the transform skipped its fixture row"
    assert task["data_source"] == name and task["question"].strip()
    check = ground_truth_check(entry.reward)
    assert check is None or check(task) is None
    if entry.reward == "code":
        return  # graded all at once, concurrently, in test_code_entries_grade_right_and_wrong
    reward = get_reward(entry.reward)
    right = reward(task, _reply(fixture.right, task))
    wrong = reward(task, _reply(fixture.wrong, task))
    assert (right.reward, right.is_correct) == (1.0, True), (name, right.info)
    assert (wrong.reward, wrong.is_correct) == (0.0, False), (name, wrong.info)


def test_code_entries_grade_right_and_wrong() -> None:
    """Every entry graded by ``code``: its right program passes every test, its wrong one none (the code
    reward's fraction of tests passed is 1.0 and 0.0). Concurrent: each reply runs in the sandbox."""
    from rllm.rewards.code import acode_reward

    cases = []
    for name, entry in CATALOG.items():
        if entry.reward == "code":
            task = entry.to_task(ROWS[name].hub_row, next(iter(entry.splits)), 0)
            cases += [
                (name, task, _reply(ROWS[name].right, task), 1.0),
                (name, task, _reply(ROWS[name].wrong, task), 0.0),
            ]
    assert len(cases) >= 20

    async def grade_all() -> list:
        return await asyncio.gather(*(acode_reward(task, reply) for _, task, reply, _ in cases))

    for (name, _, _, expected), result in zip(cases, asyncio.run(grade_all())):
        assert result.reward == expected, (name, expected, result.info)


def test_sizes_and_licences_are_stated_or_unknown() -> None:
    for entry in CATALOG.values():
        assert entry.size is None or (
            set(entry.size) == set(entry.splits) and all(n > 0 for n in entry.size.values())
        )
        assert entry.size_text == "unknown" if entry.size is None else "=" in entry.size_text
    assert catalog_entry("gsm8k").size_text == "train=7,473 test=1,319"
    assert catalog_entry("codeforces").size_text == "unknown"
    assert catalog_entry("aime2024").license == "unknown"


def test_entries_refuse_inconsistent_fields() -> None:
    from rllm.data.catalog import CatalogEntry

    base = {"hub_path": "o/n", "config": None, "splits": {"test": "test"}, "transform": dict}
    with pytest.raises(ValueError, match="family must be one of"):
        CatalogEntry("x", **base, reward="math", description="d", family="physics")
    with pytest.raises(ValueError, match="size gives splits"):
        CatalogEntry("x", **base, reward="math", description="d", size={"train": 1})
    with pytest.raises(ValueError, match="is not OWNER/NAME"):
        CatalogEntry("x", **{**base, "hub_path": "gsm8k"}, reward="math", description="d")


# ------------------------------------------------------------------ transforms' other branches


def test_rows_the_reward_cannot_grade_are_skipped() -> None:
    def convert(name: str, **changes: Any) -> Any:
        return catalog_entry(name).to_task({**ROWS[name].hub_row, **changes}, "train", 0)

    assert convert("numina-math-cot", solution="We prove it by induction.") is None
    assert convert("openr1-math-220k", answer="proof") is None
    assert convert("codeforces", generated_checker="#include <testlib.h> ...") is None
    assert convert("codeforces", interaction_format="Interact with the jury.") is None
    assert (
        convert(
            "kodcode",
            test="import pytest\nfrom solution import f\n\ndef test_f():\n    with pytest.raises(ValueError):\n        f()\n",
        )
        is None
    )
    assert (
        convert("kodcode", test="from solution import f\n\ndef test_f(tmp_path):\n    assert f(tmp_path)\n")
        is None
    )
    cpp = {"language": "cpp", "test_cases": [{"type": "stdin_stdout", "input": "1", "output": "1"}]}
    assert convert("verifiable-coding", verification_info=json.dumps(cpp)) is None
    assert convert("apps", input_output="") is None
    with pytest.raises(ValueError, match=r"math: cannot convert hub row 0 .*no \\boxed"):
        catalog_entry("math").to_tasks([{**ROWS["math"].hub_row, "solution": "x = 5"}], "test")


def test_transform_details() -> None:
    dapo = catalog_entry("dapo-math-17k").to_task(ROWS["dapo-math-17k"].hub_row, "train", 0)
    assert dapo["question"].startswith("In triangle $ABC$") and dapo["question"].endswith("find $k + m$.")
    assert dapo["task_id"] == "dapo-9a9b6eb4-a1cb-49d1-8c1e-62eaf2f74079" and dapo["ground_truth"] == "34"
    kod = catalog_entry("kodcode").to_task(ROWS["kodcode"].hub_row, "train", 0)
    code = kod["ground_truth"]["tests"][0]["code"]
    assert "from solution" not in code and code.endswith("test_add_positive()\ntest_add_zero()")
    taco = catalog_entry("taco").to_task(ROWS["taco"].hub_row, "train", 0)
    assert taco["ground_truth"] == {
        "tests": [
            {"type": "call", "args": [1, 2], "kwargs": {}, "expected": 3},
            {"type": "call", "args": [3, 4], "kwargs": {}, "expected": 7},
        ],
        "entry_point": "add",
    }
    contests = catalog_entry("code-contests").to_task(ROWS["code-contests"].hub_row, "train", 0)
    assert len(contests["ground_truth"]["tests"]) == 2  # public + private; generated left out
    assert contests["metadata"]["reference_solution"].startswith("a, b = map")  # the Python 3 one
    mc = catalog_entry("arc-easy").to_task(ROWS["arc-easy"].hub_row, "train", 0)
    assert mc["ground_truth"] == "A" and "\nA. cellular telephone\n" in mc["question"]
    sciq = [
        catalog_entry("sciq").to_task({**ROWS["sciq"].hub_row, "question": f"Q{i}?"}, "test", 0)
        for i in range(12)
    ]
    assert len({t["ground_truth"] for t in sciq}) > 1  # the right option is not always first
    xlam = catalog_entry("xlam-function-calling").to_task(ROWS["xlam-function-calling"].hub_row, "train", 0)
    assert (
        xlam["metadata"]["tools"][0]["name"] == "live_giveaways_by_type" and "Tools:\n{" in xlam["question"]
    )
    row = ROWS["verifiable-coding"].hub_row
    open_r1 = {
        **row,
        "problem_statement": row["prompt"],
        "verification_info": json.loads(row["verification_info"]),
    }
    del open_r1["prompt"]  # open-r1's Python copy: the statement renamed, verification_info a struct
    assert catalog_entry("verifiable-coding").to_task(open_r1, "train", 0) == catalog_entry(
        "verifiable-coding"
    ).to_task(row, "train", 0)
    trivia = catalog_entry("triviaqa").to_task(ROWS["triviaqa"].hub_row, "train", 0)
    assert trivia["ground_truth"] == ["Sunset Boulevard", "Sunset Blvd"]
