"""What records into the store: AgentTrainer (finished and failed runs, default path, config keys),
``rllm eval`` runs, and the trainer-side logprobs put beside each step's tokens."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from run_support import tiny_run_config

from rllm.algorithms.transforms import (
    FilterConfig,
    attach_trainer_logprobs,
    build_train_batch,
    compute_advantages,
    filter_groups,
    group_episodes,
)
from rllm.cli.main import main
from rllm.runner.context import RolloutContext
from rllm.store import EpisodeQuery, StoreReader
from rllm.store.records import episode_record
from rllm.trainer.backends.base import UnsupportedConfigError
from rllm.trainer.config import TrainConfig
from rllm.types import Episode, Step, Trajectory

TASKS = [{"task_id": f"t{i}", "question": f"Tell me about {i}."} for i in range(2)]


async def echo_workflow(task: dict[str, Any], ctx: RolloutContext) -> float:
    completion = await ctx.chat([{"role": "user", "content": task["question"]}])
    return float(completion.completion_ids[0] % 2 == 0)


def _config(model: Path, runs: Path, *overrides: str) -> TrainConfig:
    return tiny_run_config(model, runs, "rec", "trainer.steps=1", "rollout.max_tokens=3", *overrides)


def test_training_records_into_the_run_directory_store_by_default(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rllm.trainer.agent_trainer import AgentTrainer

    monkeypatch.delenv("RLLM_STORE")
    cfg = _config(tiny_model_dir, tmp_path / "runs", "trainer.store_episodes_per_step=2")
    AgentTrainer(cfg, workflow=echo_workflow, train_tasks=TASKS, test_tasks=TASKS).train()
    reader = StoreReader(tmp_path / "runs" / "rllm.db")
    [run] = reader.runs()
    assert run["status"] == "finished" and run["step"] == 1
    stored = reader.episodes(run["id"], EpisodeQuery())["episodes"]
    assert stored and all(e["step"] == 1 for e in stored)
    truncated = sum(
        reader.episode(e["id"])["trajectories"][0]["steps"][0]["finish_reason"] == "length" for e in stored
    )
    assert len(stored) <= 2 + truncated  # 2 sampled, plus any cut at max_tokens


def test_a_run_that_raises_is_recorded_as_failed(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rllm.trainer.agent_trainer import AgentTrainer

    def evaluate(self: Any, step: int) -> dict[str, float]:
        raise RuntimeError("the held-out set exploded")

    monkeypatch.setattr(AgentTrainer, "evaluate", evaluate)
    cfg = _config(tiny_model_dir, tmp_path, "eval.before=true", f"trainer.store={tmp_path}/s.db")
    with pytest.raises(RuntimeError, match="exploded"):
        AgentTrainer(cfg, workflow=echo_workflow, train_tasks=TASKS, test_tasks=TASKS).train()
    [run] = StoreReader(tmp_path / "s.db").runs()
    assert run["status"] == "failed" and run["error"].startswith("RuntimeError: the held-out set exploded")


def test_store_keys_are_checked_and_documented(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from rllm.trainer.agent_trainer import AgentTrainer

    with pytest.raises(UnsupportedConfigError, match="store_enabled=false"):
        AgentTrainer(
            _config(tiny_model_dir, tmp_path, "trainer.store_enabled=false", "trainer.store=x.db"),
            workflow=echo_workflow,
            train_tasks=TASKS,
            test_tasks=TASKS,
        )
    with pytest.raises(UnsupportedConfigError, match="is a directory"):
        AgentTrainer(
            _config(tiny_model_dir, tmp_path, f"trainer.store={tmp_path}"),
            workflow=echo_workflow,
            train_tasks=TASKS,
            test_tasks=TASKS,
        )
    with pytest.raises(ValueError, match="store_episodes_per_step"):
        _config(tiny_model_dir, tmp_path, "trainer.store_episodes_per_step=-1")
    off = AgentTrainer(
        _config(tiny_model_dir, tmp_path, "trainer.store_enabled=false"),
        workflow=echo_workflow,
        train_tasks=TASKS,
        test_tasks=TASKS,
    )
    assert off._open_run_store(None) is None
    assert main(["train", "--help-config"]) == 0
    keys = [
        line.split()[0] for line in capsys.readouterr().out.splitlines() if line.startswith("trainer.store")
    ]
    assert keys == ["trainer.store_enabled", "trainer.store", "trainer.store_episodes_per_step"]


def test_an_eval_is_recorded_as_a_run_of_its_rows(tiny_model_dir: Path, tmp_path: Path) -> None:
    from rllm.data.builtin import make_tasks
    from rllm.eval.flows import chat_flow, reward_evaluator
    from rllm.eval.runner import EvalSpec, load_results, run_eval
    from rllm.rewards.basic import number_reward

    tasks = make_tasks("larger", "test", 3)
    store = tmp_path / "rllm.db"

    def spec(**kw: Any) -> EvalSpec:
        return EvalSpec(
            dataset="larger",
            output=tmp_path / "larger.jsonl",
            model=str(tiny_model_dir),
            max_tokens=6,
            device="cpu",
            dtype="float32",
            store=store,
            **kw,
        )

    summary = run_eval(spec(k=2), tasks, chat_flow(), reward_evaluator(number_reward), show_progress=False)
    reader = StoreReader(store)
    [run] = reader.runs()
    assert run["kind"] == "eval" and run["status"] == "finished" and run["task"] == "larger"
    assert run["metrics"]["eval/accuracy"] == pytest.approx(summary.accuracy)
    evals = reader.evals(run["id"])
    assert evals["evals"] == [{"step": 0, "accuracy": pytest.approx(summary.accuracy), "n": 6}]
    rows = load_results(tmp_path / "larger.jsonl")
    assert [
        (r["task_id"], r["output"], r["reward"])
        for r in sorted(rows, key=lambda r: (r["task_id"], r["sample"]))
    ] == [(r["task_id"], r["output"], r["reward"]) for r in evals["results"]]
    assert "api_key" not in reader.config(run["id"])

    # Resuming with more samples continues the same run; its results grow to every row of the file.
    run_eval(spec(k=2, n=3), tasks, chat_flow(), reward_evaluator(number_reward), show_progress=False)
    [again] = reader.runs()
    assert again["id"] == run["id"] and reader.evals(run["id"])["total"] == 9 == len(
        load_results(tmp_path / "larger.jsonl")
    )


def test_trainer_logprobs_land_on_the_steps_of_merged_rows() -> None:
    # Two turns of one conversation (turn 2's prompt extends turn 1's tokens) and a lone call.
    turn1 = Step(prompt_ids=[1, 2], response_ids=[3, 4], logprobs=[-0.3, -0.4])
    turn2 = Step(prompt_ids=[1, 2, 3, 4, 5], response_ids=[6], logprobs=[-0.6])
    lone = Step(prompt_ids=[9], response_ids=[8, 7], logprobs=[-0.8, -0.7])
    episodes = [
        Episode(task_id="a", reward=1.0, trajectories=[Trajectory(steps=[turn1, turn2])]),
        Episode(task_id="a", reward=0.0, trajectories=[Trajectory(steps=[lone])]),
    ]
    groups, _ = filter_groups(group_episodes(episodes), FilterConfig())
    compute_advantages(groups, "grpo")
    batch = build_train_batch(groups)
    assert [s.input_ids for s in batch.sequences] == [[1, 2, 3, 4, 5, 6], [9, 8, 7]]
    # A backend's compute_logprobs: one value per input position (position i: log p(token i | tokens < i)).
    per_row = [[-float(t) for t in s.input_ids] for s in batch.sequences]
    attach_trainer_logprobs(groups, per_row)
    assert turn1.info["trainer_logprobs"] == [-3.0, -4.0]
    assert turn2.info["trainer_logprobs"] == [-6.0]
    assert lone.info["trainer_logprobs"] == [-8.0, -7.0]
    record = episode_record(episodes[0], step=1)
    assert "trainer_logprobs" not in record.detail["trajectories"][0]["steps"][0]["info"]
    assert record.tokens[0].trainer_logprobs is not None


def test_a_raw_completion_prompt_is_shown_decoded() -> None:
    step = Step(prompt_ids=[5, 6], response_ids=[7], logprobs=[-1.0])
    episode = Episode(task_id="t", trajectories=[Trajectory(steps=[step])])

    class Spaced:
        def decode(self, ids: list[int]) -> str:
            return " ".join(map(str, ids))

    record = episode_record(episode, step=1, tokenizer=Spaced())
    [shown] = record.detail["trajectories"][0]["steps"]
    assert shown["messages"] == [{"role": "user", "content": "5 6", "raw_prompt": True}]
    assert shown["response"] == "7"  # no text came with the call: decoded
