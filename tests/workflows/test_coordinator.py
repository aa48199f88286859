"""The coordinator workflow on the tiny model: the multi-part dataset, the capability table's choice rule,
per-role credit on a hand-made episode, and the workflow's config options."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import ValidationError
from run_support import tiny_run_config
from workflow_support import ScriptedEngine, run_episodes

from rllm.algorithms.transforms import group_episodes
from rllm.data.builtin import Problem, is_held_out
from rllm.data.generated import MULTI_PART
from rllm.data.multi_part import PART_KINDS, multi_part_tasks
from rllm.inference.base import EngineCapabilities, SamplingParams
from rllm.inference.grammar import Grammar
from rllm.inference.local import LocalEngine
from rllm.rewards.basic import number_list, number_list_reward
from rllm.runner.context import RolloutContext
from rllm.trainer.agent_trainer import AgentTrainer
from rllm.trainer.checkpoint import latest_checkpoint, load_loop_state
from rllm.trainer.config import workflow_config
from rllm.trainer.reporting import episode_metrics
from rllm.trainer.sft_data import load_conversations
from rllm.workflows.capability import CapabilityTable
from rllm.workflows.coordinator import (
    COORDINATOR_PROMPT,
    CoordinatorWorkflow,
    contribution_credit,
    faithful_example,
    final_grammar,
)

SAMPLING = SamplingParams(temperature=1.0, max_tokens=16, seed=0)
WORKERS = {"worker_a": "plain", "worker_b": "worked_example"}
REPO = Path(__file__).resolve().parents[2]


def test_multi_part_tasks_have_parts_of_distinct_kinds_and_a_combined_answer() -> None:
    train, test = multi_part_tasks("train", 60, seed=0), multi_part_tasks("test", 60, seed=0)
    assert MULTI_PART.reward == "number_list"
    for split, tasks in (("train", train), ("test", test)):
        for task in tasks:
            parts = task["metadata"]["parts"]
            kinds = [p["kind"] for p in parts]
            assert len(parts) in (2, 3) and len(set(kinds)) == len(kinds) and set(kinds) <= set(PART_KINDS)
            assert task["ground_truth"] == ", ".join(p["ground_truth"] for p in parts)
            for i, p in enumerate(parts):
                assert f"Part {i + 1}: {p['question']}" in task["question"]
                # a part is a test part exactly when its problem is held out of its kind's own split
                key = ",".join(sorted(re.findall(r"\d+", p["question"]), key=int))
                if p["kind"] == "count_letter":
                    word, letter = re.findall(r"'(\w+)'", p["question"])[::-1]
                    key = f"{word}:{letter}"
                assert is_held_out(p["kind"], Problem(p["question"], p["ground_truth"], key)) == (
                    split == "test"
                )
    assert {len(t["metadata"]["parts"]) for t in train} == {2, 3}
    assert len({t["question"] for t in test}) == len(test)
    assert multi_part_tasks("test", 60, seed=0) == test  # deterministic by seed
    assert multi_part_tasks("train", 60, seed=1) != train
    with pytest.raises(ValueError, match="split must be"):
        multi_part_tasks("dev", 1)


def test_number_list_reward_grades_each_position_and_refuses_extra_numbers() -> None:
    task = {"task_id": "t", "ground_truth": "82, 7, 3"}
    assert number_list_reward(task, "82, 7, 3").is_correct
    assert number_list_reward(task, "82,7,3.").reward == 1.0
    wrong = number_list_reward(task, "82, 8, 3")
    assert (wrong.reward, wrong.is_correct) == (pytest.approx(2 / 3), False)
    assert number_list_reward(task, "Part 1: 82, 7, 3").reward == 0.0  # four numbers for three parts
    assert number_list_reward(task, "no idea").reward == 0.0


def test_capability_table_tries_every_role_then_prefers_the_better_one() -> None:
    table = CapabilityTable(["a", "b"], exploration=2.0, seed=0)
    # One batch: all choose before any finishes, and the pending assignments spread them over the roles.
    first = [table.choose("add") for _ in range(4)]
    assert first[:2] == ["a", "b"] and sorted(first) == ["a", "a", "b", "b"]
    truth = {"a": 0.0, "b": 1.0}  # b always gets add right, a never
    for role in first:
        table.record(role, "add", truth[role])
    picks = []
    for _ in range(40):
        role = table.choose("add")
        table.record(role, "add", truth[role])
        picks.append(role)
    assert picks.count("b") >= 32  # exploits b ...
    assert "a" in picks[20:]  # ... and the bonus still has it try a now and then
    assert table.rates()[("b", "add")] == 1.0 and table.rates()[("a", "add")] == 0.0
    assert table.choose("add", explore=False) == "b"
    # Another kind starts from scratch: its own record per role.
    assert table.choose("larger") == "a"
    metrics = table.metrics()
    assert metrics["coordinator/capability/b/add"] == 1.0 and "coordinator/capability/a/larger" not in metrics
    # Same seed, same history, same choices; the state round-trips.
    again = CapabilityTable(["a", "b"], exploration=2.0, seed=0)
    again.load_state_dict(table.state_dict())
    assert again.state_dict() == table.state_dict()
    assert [again.choose("add") for _ in range(5)] == [table.choose("add") for _ in range(5)]


def test_greedy_exploration_settles_after_trying_each_role() -> None:
    table = CapabilityTable(["a", "b", "c"], exploration=0.0, seed=3)
    for role, ok in zip([table.choose("k") for _ in range(3)], (0.0, 1.0, 0.0), strict=True):
        table.record(role, "k", ok)
    assert {table.choose("k") for _ in range(10)} == {"b"}


def _scripted(prompt: str) -> str:
    """Worker replies by part; the coordinator composes from what it was told (dropping 'The sum is')."""
    if "You coordinate workers" in prompt:
        mine = prompt.split("Part 1: Which number is larger, 37")[-1]  # after the worked example
        return "82, 9" if "The sum is 9." in mine else "82, 7"
    if "larger, 37 or 82" in prompt:
        return "82"
    return "The sum is 9." if "You answer short questions" in prompt else "7"


TASK = {
    "task_id": "mp",
    "question": "...",
    "ground_truth": "82, 9",
    "metadata": {
        "parts": [
            {"kind": "larger", "question": "Which number is larger, 37 or 82?", "ground_truth": "82"},
            {"kind": "add", "question": "What is 4 + 5?", "ground_truth": "9"},
        ]
    },
}


def test_each_role_is_credited_with_its_own_contribution(engine: LocalEngine) -> None:
    # Attempt 1 gives both parts to worker_a (untried roles go first, in order); attempt 2 to worker_b,
    # whose worked-example prompt gets add right where worker_a's plain one says 7.
    workflow = CoordinatorWorkflow(WORKERS, exploration=1.0, coordinator_reward="final")
    first, second = run_episodes(
        ScriptedEngine(engine, _scripted), workflow, [TASK], SAMPLING, group_size=2, max_concurrency=1
    )
    assert first.info["assigned"] == ["worker_a", "worker_a"]
    assert second.info["assigned"] == ["worker_b", "worker_b"]
    assert [(t.name, t.info["key"], t.reward) for t in first.trajectories] == [
        ("worker_a", "worker_a#0", 1.0),
        ("worker_a", "worker_a#1", 0.0),
        ("coordinator", "coordinator", 0.5),  # "82, 7": one part of two right
    ]
    assert [(t.name, t.reward) for t in second.trajectories] == [
        ("worker_b", 1.0),
        ("worker_b", 1.0),
        ("coordinator", 1.0),
    ]
    assert (first.reward, first.is_correct, second.reward, second.is_correct) == (0.5, False, 1.0, True)
    assert first.metrics["worker_a/accuracy"] == 0.5 and second.metrics["worker_b/accuracy"] == 1.0
    assert first.metrics["parts/add/accuracy"] == 0.0 and second.metrics["parts/add/accuracy"] == 1.0
    assert first.metrics["parts/all_correct"] == 0.0 and second.metrics["parts/all_correct"] == 1.0
    assert first.metrics["coordinator/faithful"] == 1.0 and second.metrics["coordinator/faithful"] == 1.0
    worker_b_prompt = second.trajectories[1].steps[0].messages
    assert worker_b_prompt[0]["role"] == "system" and len(worker_b_prompt) == 4  # system, example, question
    coordinator_prompt = second.trajectories[2].steps[0].messages[-1]["content"]
    assert "Part 2: What is 4 + 5?\nWorker's answer: The sum is 9." in coordinator_prompt
    assert workflow.table.rates() == {
        ("worker_a", "larger"): 1.0,
        ("worker_a", "add"): 0.0,
        ("worker_b", "larger"): 1.0,
        ("worker_b", "add"): 1.0,
    }
    # Each role's own credit, reported per step.
    assert {k: v for k, v in episode_metrics([first, second]).items() if k.startswith("role/")} == {
        "role/coordinator/reward": 0.75,
        "role/worker_a/reward": 0.5,
        "role/worker_b/reward": 1.0,
    }
    # Each role its own advantage group across the attempts.
    groups = group_episodes([first, second])
    assert [(g.trajectory_name, len(g.members)) for g in groups] == [
        ("worker_a", 2),
        ("coordinator", 2),
        ("worker_b", 2),
    ]
    # A greedy rollout (the held-out eval) takes the best rate and leaves the table alone.
    before = workflow.table.state_dict()
    (greedy,) = run_episodes(
        ScriptedEngine(engine, _scripted), workflow, [TASK], SamplingParams(temperature=0.0, max_tokens=16)
    )
    assert greedy.info["assigned"][1] == "worker_b" and workflow.table.state_dict() == before


def test_contribution_credit_does_not_blame_the_coordinator_for_a_workers_mistake(
    engine: LocalEngine,
) -> None:
    # worker_a says 7 for 4 + 5 and the coordinator passes it on faithfully: under the default credit its
    # own reward is full, while the worker's and the episode's (the final answer's) stay as they are.
    (first,) = run_episodes(ScriptedEngine(engine, _scripted), CoordinatorWorkflow(WORKERS), [TASK], SAMPLING)
    assert first.info["assigned"] == ["worker_a", "worker_a"]
    assert [t.reward for t in first.trajectories] == [1.0, 0.0, 1.0]
    assert (first.reward, first.is_correct) == (0.5, False)
    # Per part: right, or its worker's answer; nothing for another number or a wrong count.
    assert contribution_credit("82, 9", ["82", "9"], ["82", "7"]) == 1.0  # overruled the worker, rightly
    assert contribution_credit("82, 7", ["82", "9"], ["82", "7"]) == 1.0  # passed the worker's 7 on
    assert contribution_credit("82, 8", ["82", "9"], ["82", "7"]) == 0.5  # made up an 8
    assert contribution_credit("81, 8", ["82", "9"], ["82", "7"]) == 0.0
    assert contribution_credit("82, 7, 1", ["82", "9"], ["82", "7"]) == 0.0  # three numbers for two parts
    assert contribution_credit("82.0, 9", ["82", "9"], [None, "7"]) == 1.0  # a worker with no number
    with pytest.raises(ValueError, match="choose one of contribution, final"):
        CoordinatorWorkflow(WORKERS, coordinator_reward="truth")


def _worded_sum(prompt: str) -> str:
    """A worker that states its sum as a sum (how SmolLM2-135M answers "What is 4 + 5?")."""
    if "You coordinate workers" in prompt:
        return "82, 9"
    return "82" if "larger, 37 or 82" in prompt else "4 + 5 = 9"


@pytest.mark.parametrize(("worker_reward", "add_reward"), [("reported", 1.0), ("exact", 0.0)])
def test_worker_reward_grades_the_number_passed_on_or_the_exact_reply(
    engine: LocalEngine, worker_reward: str, add_reward: float
) -> None:
    # "4 + 5 = 9" passes 9 on (the coordinator's final answer is right): reported credits the worker, exact
    # does not (three numbers, not "just the number"), and the capability table records that score.
    workflow = CoordinatorWorkflow(WORKERS, worker_reward=worker_reward)
    (ep,) = run_episodes(ScriptedEngine(engine, _worded_sum), workflow, [TASK], SAMPLING)
    assert [t.reward for t in ep.trajectories] == [1.0, add_reward, 1.0]
    assert (ep.reward, ep.is_correct) == (1.0, True)  # the final answer's score either way
    assert ep.metrics["parts/all_correct"] == add_reward and ep.metrics["coordinator/faithful"] == 1.0
    assert workflow.table.rates()[("worker_a", "add")] == add_reward
    with pytest.raises(ValueError, match="choose one of reported, exact"):
        CoordinatorWorkflow(WORKERS, worker_reward="last")


def test_a_worker_reply_cut_off_at_max_tokens_passes_nothing_on(engine: LocalEngine) -> None:
    # "9" then a ramble to the token cap: the last number where the cut fell is no report, under either
    # worker reward; the same ramble that ends in time is credited by its last number.
    def rambling(words: int) -> Callable[[str], str]:
        def reply(prompt: str) -> str:
            if "You coordinate workers" in prompt:
                return "82, 9"
            return "82" if "larger, 37 or 82" in prompt else "9\n" + "9 " * words

        return reply

    params = SamplingParams(temperature=1.0, max_tokens=12, seed=0)
    for worker_reward in ("reported", "exact"):
        workflow = CoordinatorWorkflow(WORKERS, worker_reward=worker_reward)
        (cut,) = run_episodes(ScriptedEngine(engine, rambling(40)), workflow, [TASK], params)
        assert cut.trajectories[1].steps[0].finish_reason == "length"
        assert [t.reward for t in cut.trajectories] == [1.0, 0.0, 1.0]
        assert workflow.table.rates()[("worker_a", "add")] == 0.0
    (ended,) = run_episodes(ScriptedEngine(engine, rambling(3)), CoordinatorWorkflow(WORKERS), [TASK], params)
    assert ended.trajectories[1].steps[0].finish_reason == "stop"
    assert [t.reward for t in ended.trajectories] == [1.0, 1.0, 1.0]


def test_the_tiny_models_own_replies_give_complete_episodes(engine: LocalEngine) -> None:
    tasks = multi_part_tasks("train", 2, seed=0)
    for ep in run_episodes(engine, CoordinatorWorkflow(WORKERS), tasks, SAMPLING, group_size=2):
        assert not ep.failed and ep.trajectories[-1].name == "coordinator"
        assert len(ep.trajectories) == len(ep.info["assigned"]) + 1
    kinds = {p["kind"] for t in tasks for p in t["metadata"]["parts"]}
    assert {f"coordinator/capability/{r}/{k}" for r in WORKERS for k in kinds} <= set(ep.metrics)


def test_a_task_without_parts_is_refused(engine: LocalEngine) -> None:
    (ep,) = run_episodes(engine, CoordinatorWorkflow(WORKERS), [{"task_id": "x", "question": "?"}], SAMPLING)
    assert ep.failed and "data.task=multi_part" in str(ep.info)


def test_config_options_are_validated() -> None:
    cfg = workflow_config("coordinator", exploration=0.5)
    assert cfg.workers == WORKERS and cfg.exploration == 0.5 and cfg.coordinator_reward == "contribution"
    assert cfg.worker_reward == "reported"
    assert workflow_config("coordinator", worker_reward="exact").worker_reward == "exact"
    with pytest.raises(ValidationError, match="'reported' or 'exact'"):
        workflow_config("coordinator", worker_reward="last")
    assert workflow_config("coordinator", coordinator_reward="final").coordinator_reward == "final"
    with pytest.raises(ValidationError, match="'contribution' or 'final'"):
        workflow_config("coordinator", coordinator_reward="truth")
    with pytest.raises(ValidationError, match="at least 2 worker roles"):
        workflow_config("coordinator", workers={"solo": "plain"})
    with pytest.raises(ValidationError, match="did you mean 'worked_example'"):
        workflow_config("coordinator", workers={"a": "plain", "b": "worked_exampel"})
    with pytest.raises(ValidationError, match="not 'coordinator'"):
        workflow_config("coordinator", workers={"a": "plain", "coordinator": "plain"})
    with pytest.raises(ValidationError, match="greater than or equal to 0"):
        workflow_config("coordinator", exploration=-1)
    with pytest.raises(ValidationError, match="exploration"):
        workflow_config("single_turn", exploration=1.0)


def test_the_capability_table_is_checkpointed_and_restored_on_resume(tiny_model_dir, tmp_path) -> None:
    overrides = [
        "workflow.name=coordinator",
        "data.task=multi_part",
        "data.train_size=8",
        "rollout.max_tokens=4",
        "trainer.store_enabled=false",
    ]
    cfg = tiny_run_config(tiny_model_dir, tmp_path, "coord", "trainer.steps=1", *overrides)
    first = AgentTrainer(cfg)
    first.train()
    saved = load_loop_state(latest_checkpoint(first.run_dir))["workflow"]["capability"]
    assert saved == first.workflow.table.state_dict() and sum(r["done"] for r in saved["records"]) > 0
    cfg = tiny_run_config(
        tiny_model_dir, tmp_path, "coord", "trainer.steps=2", "trainer.resume=true", *overrides
    )
    resumed = AgentTrainer(cfg)
    restored = []
    real_train_step = resumed.train_step

    def train_step(step: int) -> dict[str, float]:
        restored.append(resumed.workflow.table.state_dict())  # before step 2 samples anything
        return real_train_step(step)

    resumed.train_step = train_step
    resumed.train()
    assert restored == [saved]


def test_the_final_answer_grammar_gives_one_number_per_part(engine: LocalEngine) -> None:
    # The tiny random model at T = 1 never lists numbers by itself; held to the grammar it always does.
    tasks = multi_part_tasks("train", 4, seed=1)
    params = SamplingParams(temperature=1.0, max_tokens=48, seed=0)
    episodes = run_episodes(engine, CoordinatorWorkflow(WORKERS), tasks, params, group_size=3)
    for ep in episodes:
        final, n = ep.info["final"], len(ep.info["assigned"])
        assert re.fullmatch(r"-?\d{1,12}(, -?\d{1,12})*", final), final
        assert len(number_list(final)) == n
        (step,) = ep.trajectories[-1].steps
        # Where the grammar left no choice (a separator's space, the end), the token is not the model's.
        forced = [i for i, m in enumerate(step.response_mask) if m == 0]
        assert all(step.logprobs[i] == 0.0 for i in forced)
    off = run_episodes(engine, CoordinatorWorkflow(WORKERS, constrain_final=False), tasks[:2], params)
    assert not any(re.fullmatch(r"-?\d+(, -?\d+)*", ep.info["final"]) for ep in off)


def test_a_grammar_in_the_rollout_context_records_forced_tokens_as_not_sampled(engine: LocalEngine) -> None:
    grammar = Grammar('start: "The answer is " NUMBER\nNUMBER: /[0-9]{1,3}/\n', engine.tokenizer)
    ctx = RolloutContext(
        engine, SamplingParams(temperature=1.0, max_tokens=16, seed=3), episode_id="e", task_id="t"
    )
    reply = asyncio.run(ctx.complete([1, 2, 3], trajectory="solver", grammar=grammar))
    assert re.fullmatch(r"The answer is \d{1,3}", reply.text)
    (step,) = ctx.trajectory("solver").steps
    prefix = len(engine.tokenizer("The answer is ", add_special_tokens=False)["input_ids"])
    assert step.response_mask[:prefix] == [0] * prefix and step.logprobs[:prefix] == [0.0] * prefix
    assert step.response_mask[prefix] == 1 and step.logprobs[prefix] < 0  # the first digit is chosen

    class NoConstraints(ScriptedEngine):
        capabilities = EngineCapabilities(name="fake-free", weight_transfer="tensors")

    ctx = RolloutContext(NoConstraints(engine, str), SamplingParams(), episode_id="e", task_id="t")
    with pytest.raises(ValueError, match="fake-free engine cannot constrain its output"):
        asyncio.run(ctx.complete([1, 2], grammar=grammar))


def test_faithful_examples_pass_on_each_workers_number(engine: LocalEngine, tmp_path) -> None:
    # The warm start's examples: the coordinator's prompt, then each worker's number in order, in the
    # final answer's grammar, worth full contribution credit; a reply with no integer gives no example.
    parts = TASK["metadata"]["parts"]
    example = faithful_example(parts, ["The larger number is 82.", "The sum is 7."])
    *prompt, answer = example["messages"]
    assert (
        prompt[-1]["content"].endswith(COORDINATOR_PROMPT.split("{reports}")[-1])
        and "Worker's answer: The sum is 7." in prompt[-1]["content"]
    )
    assert answer == {"role": "assistant", "content": "82, 7"}
    assert Grammar(final_grammar(2), engine.tokenizer).replay(
        engine.tokenizer.encode("82, 7") + [engine.eos_ids[0]], len(engine.tokenizer)
    )
    assert contribution_credit(answer["content"], ["82", "9"], ["82", "7"]) == 1.0
    assert faithful_example(parts, ["82", "I cannot say."]) is None
    assert faithful_example(parts, ["82", "about 9.5"]) is None

    spec = importlib.util.spec_from_file_location("warm_start", REPO / "examples/coordinator/warm_start.py")
    warm_start = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(warm_start)
    shy = {
        **TASK,
        "task_id": "shy",
        "metadata": {"parts": [parts[0], {**parts[1], "question": "What is 4 + 6?"}]},
    }
    policy = ScriptedEngine(engine, lambda p: "I do not know." if "4 + 6" in p else _scripted(p))
    examples, skipped = asyncio.run(
        warm_start.build_examples(CoordinatorWorkflow(WORKERS), policy, [TASK, shy], max_tokens=16)
    )
    assert skipped == 1 and [e["task_id"] for e in examples] == ["mp"]
    # Each part went to a worker drawn at random, prompted in its style; the answer is what it said.
    assert examples[0]["messages"][-1]["content"] in {"82, 9", "82, 7"}
    path = tmp_path / "sft.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in examples))
    (conv,) = load_conversations(path)  # rllm sft reads it
    assert conv.messages[-1]["role"] == "assistant"
