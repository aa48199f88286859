"""The built-in ``finance`` task (``rllm.data.finance``): deterministic, held out by company, answers right
by recomputation from the tables, graded by ``finance_number``; and the tool agent it configures."""

from __future__ import annotations

import re

from rllm.data.finance import company_questions, finance_examples, finance_tasks, is_held_out, split_questions
from rllm.data.registry import DatasetRegistry
from rllm.rewards.registry import get_reward
from rllm.tools.finance_reports import financial_reports
from rllm.trainer.config import TrainConfig
from rllm.trainer.workflows import build_workflow
from rllm.utils.config import load_config

_VALUE = re.compile(r"What was (?P<c>.+?)'s? (?P<item>[a-z ]+) in (?P<y>\d{4})\?")
_CHANGE = re.compile(
    r"By how much did (?P<c>.+?)'s? (?P<item>[a-z ]+) change from (?P<y1>\d{4}) to (?P<y2>\d{4})\?"
)
_SHARE = re.compile(r"What percentage of revenue was (?P<c>.+?)'s? (?P<item>[a-z ]+) in (?P<y>\d{4})\?")


def _recompute(question: str) -> float:
    """The answer, worked out again from the question's words and the tables."""
    tables = financial_reports()
    if m := _VALUE.fullmatch(question):
        return tables[m["c"]][m["item"]][int(m["y"])]
    if m := _CHANGE.fullmatch(question):
        row = tables[m["c"]][m["item"]]
        return row[int(m["y2"])] - row[int(m["y1"])]
    m = _SHARE.fullmatch(question)
    assert m, question
    return 100 * tables[m["c"]][m["item"]][int(m["y"])] / tables[m["c"]]["revenue"][int(m["y"])]


def test_generation_is_deterministic_and_seeded() -> None:
    assert finance_tasks("train", 50, seed=3) == finance_tasks("train", 50, seed=3)
    assert finance_tasks("train", 50, seed=3) != finance_tasks("train", 50, seed=4)
    assert finance_tasks("test", 20) == finance_tasks("test", 20)
    assert len({t["question"] for t in finance_tasks("test", 500)}) == len(split_questions("test"))


def test_held_out_questions_are_about_other_companies() -> None:
    train = {q.company for q in split_questions("train")}
    test = {q.company for q in split_questions("test")}
    assert train and test and not train & test
    assert train | test == set(financial_reports())
    assert all(is_held_out(c) for c in test)
    for seed in range(3):
        assert {t["metadata"]["company"] for t in finance_tasks("train", 300, seed=seed)} <= train
        assert {t["metadata"]["company"] for t in finance_tasks("test", 300, seed=seed)} <= test


def test_every_answer_is_right_by_recomputation_and_graded_right() -> None:
    reward = get_reward("finance_number")
    kinds = set()
    for company in financial_reports():
        for q in company_questions(company):
            kinds.add(q.kind)
            truth = _recompute(q.question)
            if q.kind == "percent":
                assert q.answer == f"{truth:.2f}%"
            else:
                assert float(q.answer) == truth
            task = {"task_id": "t", "question": q.question, "ground_truth": q.answer}
            assert reward(task, q.answer.rstrip("%")).is_correct
            assert not reward(task, str(truth + 10 + abs(truth) * 0.05)).is_correct
    assert kinds == {"value", "change", "percent"}


def test_the_percent_answers_take_the_forms_a_model_writes() -> None:
    reward = get_reward("finance_number")
    task = {"task_id": "t", "question": "?", "ground_truth": "13.48%"}
    for reply in ("13.48", "13.48%", "0.1348", "The answer is 13.4831460674", "13.5"):
        assert reward(task, reply).is_correct, reply
    for reply in ("12", "1348", ""):
        assert not reward(task, reply).is_correct, reply


def test_the_dataset_is_built_in_with_its_reward_and_agent_prompt() -> None:
    info = DatasetRegistry().info("finance")
    assert info.kind == "built-in" and info.reward == "finance_number"
    assert info.splits == {"train": None, "test": None}  # generated: as many rows as asked for
    rows = DatasetRegistry().load("finance", "test", limit=5)
    assert [r["question"] for r in rows] == [t["question"] for t in finance_tasks("test", 5)]
    assert info.examples and list(info.examples) == finance_examples()
    # The examples' company is in no split, so they give no answer away.
    assert "Juniper Tools" not in financial_reports()


def test_the_tool_agent_takes_the_tasks_prompt_and_examples() -> None:
    cfg = load_config(
        TrainConfig,
        None,
        ["workflow.name=tool_agent", "workflow.tools=[table_lookup, calculator]", "data.task=finance"],
    )
    workflow = build_workflow(cfg)
    assert workflow.registry.names == ["table_lookup", "calculator"]
    assert workflow.examples == finance_examples()
    assert "table_lookup" in workflow.system_prompt
    messages = workflow.messages(finance_tasks("test", 1)[0])
    assert messages[0]["role"] == "system" and messages[-1]["content"].startswith(("What", "By how"))
    # Worked examples that call a tool the run does not have are refused, not shown to the model.
    cfg = load_config(TrainConfig, None, ["workflow.name=tool_agent", "data.task=finance"])
    try:
        build_workflow(cfg)
    except ValueError as err:
        assert "call table_lookup: add it to workflow.tools" in str(err)
    else:
        raise AssertionError("a finance tool agent without table_lookup was built")
