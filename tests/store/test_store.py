"""The run store: what a RunWriter writes comes back from a StoreReader, whole and in the API's shapes."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from rllm.store import EpisodeQuery, NotFound, RunWriter, StoreError, StoreReader, sample_episodes
from rllm.store.writer import new_run_id
from rllm.types import Episode, Step, TerminationReason, Trajectory


class FakeTokenizer:
    def decode(self, ids: list[int]) -> str:
        return "".join(f"<{i}>" for i in ids)


_tokenizer = FakeTokenizer()


def _episode(
    task_id: str,
    reward: float,
    *,
    answer: str = "42",
    roles: tuple[str, ...] = ("default",),
    reason: TerminationReason = TerminationReason.ENV_DONE,
    error: str | None = None,
) -> Episode:
    trajectories = [
        Trajectory(
            name=role,
            reward=reward,
            steps=[
                Step(
                    prompt_ids=[1, 2, 3],
                    response_ids=[7, 8, 9],
                    logprobs=[-0.5, float("-inf"), -0.25],
                    response_mask=[1, 0, 1],
                    messages=[{"role": "user", "content": f"What is 6*7? ({task_id})"}],
                    response_text=f"{role} says {answer}",
                    advantage=reward - 0.5,
                    reward=reward,
                    info={"drift_at": [2], "trainer_logprobs": [-0.4, 0.0, -0.3]},
                )
            ],
        )
        for role in roles
    ]
    return Episode(
        task_id=task_id,
        task={"question": f"What is 6*7? ({task_id})", "answer": "42"},
        trajectories=trajectories,
        reward=reward,
        is_correct=reward > 0.5,
        termination_reason=reason,
        error=error,
        info={"note": float("nan")},
    )


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return tmp_path / "rllm.db"


def test_a_run_round_trips(store: Path) -> None:
    run = RunWriter.start(
        store,
        kind="train",
        name="my run",
        config={"trainer": {"steps": 2}},
        model="tiny",
        task="larger",
        location=store.parent / "my run",
    )
    run.log(0, {"eval/accuracy": 0.25, "eval/n": 4})
    run.stage_episodes(1, [_episode("a", 1.0), _episode("a", 0.0, answer="41")], _tokenizer)
    run.log(1, {"reward/mean": 0.5, "train/loss": float("nan"), "accuracy": 0.5})
    run.log(2, {"reward/mean": 0.75, "eval/accuracy": 0.5, "eval/n": 4})
    reader = StoreReader(store)

    [listed] = reader.runs()
    assert listed["id"] == run.id and listed["id"].startswith("my_run-")
    assert listed["status"] == "running" and listed["kind"] == "train" and listed["step"] == 2
    assert listed["model"] == "tiny" and listed["task"] == "larger" and listed["ended_at"] is None
    assert listed["metrics"] == {
        "reward/mean": 0.75,
        "eval/accuracy": 0.5,
        "accuracy": 0.5,
    }  # nan is no value

    detail = reader.run(run.id)
    assert detail["config"] == {"trainer": {"steps": 2}} == reader.config(run.id)
    assert detail["code_version"]
    assert detail["metric_keys"] == ["accuracy", "eval/accuracy", "eval/n", "reward/mean", "train/loss"]
    assert reader.metrics(run.id, ["reward/mean", "train/loss"]) == {
        "series": {"reward/mean": [[1, 0.5], [2, 0.75]], "train/loss": [[1, None]]},
        "last_step": 2,
    }
    assert reader.metrics(run.id, ["reward/mean"], after_step=1)["series"] == {"reward/mean": [[2, 0.75]]}
    assert reader.metrics(run.id, after_step=2) == {
        "series": {k: [] for k in detail["metric_keys"]},
        "last_step": 2,
    }
    assert reader.evals(run.id)["evals"] == [
        {"step": 0, "accuracy": 0.25, "n": 4},
        {"step": 2, "accuracy": 0.5, "n": 4},
    ]

    run.finish({"final_accuracy": 0.5})
    finished = reader.run(run.id)
    assert finished["status"] == "finished" and finished["summary"] == {"final_accuracy": 0.5}
    assert finished["ended_at"] >= finished["started_at"]


def test_episodes_and_their_tokens_round_trip(store: Path) -> None:
    run = RunWriter.start(store, kind="train", name="r", config={})
    episodes = [_episode("a", 1.0, roles=("solver", "judge")), _episode("b", 0.0, answer="forty-one")]
    run.stage_episodes(3, episodes, _tokenizer)
    run.log(3, {"reward/mean": 0.5})
    reader = StoreReader(store)

    listing = reader.episodes(run.id, EpisodeQuery())
    assert listing["total"] == 2
    assert {e["id"] for e in listing["episodes"]} == {e.id for e in episodes}
    a = next(e for e in listing["episodes"] if e["task_id"] == "a")
    assert a == {
        "id": episodes[0].id,
        "step": 3,
        "task_id": "a",
        "reward": 1.0,
        "is_correct": True,
        "termination_reason": "env_done",
        "error": None,
        "roles": ["solver", "judge"],
        "n_steps": 2,
        "preview": "judge says 42",
    }
    assert reader.steps(run.id) == [3]

    full = reader.episode(episodes[0].id)
    assert full["run_id"] == run.id and full["task"]["answer"] == "42" and full["info"] == {"note": None}
    assert [t["name"] for t in full["trajectories"]] == ["solver", "judge"]
    step = full["trajectories"][1]["steps"][0]
    assert step["messages"] == [{"role": "user", "content": "What is 6*7? (a)"}]
    assert step["response"] == "judge says 42" and step["advantage"] == 0.5 and step["reward"] == 1.0
    assert step["info"] == {"drift_at": [2]}  # the trainer logprobs live with the tokens

    tokens = reader.tokens(episodes[0].id, trajectory=1, step=0)
    assert tokens["drift_at"] == 2
    assert [t["text"] for t in tokens["tokens"]] == ["<1>", "<2>", "<3>", "<7>", "<8>", "<9>"]
    assert [t["is_prompt"] for t in tokens["tokens"]] == [True] * 3 + [False] * 3
    assert [t["mask"] for t in tokens["tokens"]] == [0, 0, 0, 1, 0, 1]
    response = tokens["tokens"][3:]
    assert [t["logprob"] for t in response] == [-0.5, None, -0.25]  # the masked-out token has none
    assert [t["trainer_logprob"] for t in response] == [-0.4, None, -0.3]
    assert [t["advantage"] for t in response] == [0.5, None, 0.5]
    with pytest.raises(NotFound, match="no trajectory 2 step 0"):
        reader.tokens(episodes[0].id, trajectory=2, step=0)


def test_episode_filters(store: Path) -> None:
    run = RunWriter.start(store, kind="train", name="r", config={})
    run.stage_episodes(
        1, [_episode("a", 1.0), _episode("b", 0.0, answer="seven", roles=("solver",))], _tokenizer
    )
    run.log(1, {})
    run.stage_episodes(
        2,
        [
            _episode("c", 0.0, reason=TerminationReason.ERROR, error="boom"),
            _episode("d", 0.5, answer="Forty-Two"),
        ],
        _tokenizer,
    )
    run.log(2, {})
    reader = StoreReader(store)

    def ids(**query: object) -> list[str]:
        return [e["task_id"] for e in reader.episodes(run.id, EpisodeQuery(**query))["episodes"]]

    assert ids() == ["d", "c", "b", "a"]  # newest step first
    assert ids(step=1) == ["b", "a"]
    assert ids(min_reward=0.5) == ["d", "a"] and ids(max_reward=0.0) == ["c", "b"]
    assert ids(min_reward=0.2, max_reward=0.7) == ["d"]
    assert ids(role="solver") == ["b"]
    assert ids(termination="error") == ["c"]
    assert ids(correct=True) == ["a"] and ids(correct=False) == ["d", "c", "b"]
    assert ids(q="SEVEN") == ["b"]  # responses, case-insensitively
    assert ids(q="forty-two") == ["d"]
    assert ids(q="(c)") == ["c"]  # the task's question
    assert ids(q="7") == ["d", "c", "b", "a"]  # shorter than a trigram: still a substring search
    assert ids(q="nothing like it") == []
    assert ids(limit=1, offset=1) == ["c"]
    assert reader.episodes(run.id, EpisodeQuery(limit=1))["total"] == 4


def test_failed_run_records_the_exception(store: Path) -> None:
    run = RunWriter.start(store, kind="train", name="r", config={})
    try:
        raise RuntimeError("CUDA out of memory")
    except RuntimeError as exc:
        run.fail(exc)
    [listed] = StoreReader(store).runs()
    assert listed["status"] == "failed" and listed["error"].startswith("RuntimeError: CUDA out of memory")
    assert "Traceback" in listed["error"]
    with pytest.raises(RuntimeError, match="has ended"):
        run.log(1, {"x": 1.0})


def test_a_silent_running_run_reads_as_crashed(store: Path) -> None:
    run = RunWriter.start(store, kind="train", name="r", config={}, heartbeat_s=3600)
    assert StoreReader(store).runs()[0]["status"] == "running"
    time.sleep(0.05)
    assert StoreReader(store, stale_after_s=0.01).runs()[0]["status"] == "crashed"
    run.finish()
    assert StoreReader(store, stale_after_s=0.01).runs()[0]["status"] == "finished"


def test_the_heartbeat_thread_beats_between_steps(store: Path) -> None:
    run = RunWriter.start(store, kind="train", name="r", config={}, heartbeat_s=0.05)
    first = StoreReader(store).runs()[0]["heartbeat_at"]
    time.sleep(0.3)
    assert StoreReader(store).runs()[0]["heartbeat_at"] > first
    run.finish()


def test_resume_continues_the_run_and_drops_what_it_redoes(store: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "job"
    first = RunWriter.start(store, kind="train", name="job", config={}, location=run_dir)
    for step in (1, 2, 3):
        first.stage_episodes(step, [_episode(f"t{step}", 1.0)], _tokenizer)
        first.log(step, {"reward/mean": float(step)})
    first.fail("killed")
    again = RunWriter.start(
        store, kind="train", name="job", config={"resumed": True}, location=run_dir, resume_from_step=2
    )
    assert again.id == first.id
    reader = StoreReader(store)
    assert reader.run(first.id)["status"] == "running" and reader.run(first.id)["step"] == 2
    assert reader.run(first.id)["metrics"] == {"reward/mean": 2.0}
    assert reader.metrics(first.id)["series"]["reward/mean"] == [[1, 1.0], [2, 2.0]]
    assert reader.steps(first.id) == [1, 2]
    assert reader.episodes(first.id, EpisodeQuery(q="(t3)"))["total"] == 0
    again.log(3, {"reward/mean": 30.0})
    assert reader.metrics(first.id)["series"]["reward/mean"][-1] == [3, 30.0]
    again.finish()
    # Without resume (or at another place) a new run starts.
    other = RunWriter.start(store, kind="train", name="job", config={}, location=run_dir)
    assert other.id != first.id and len(reader.runs()) == 2
    other.finish()


def test_eval_results(store: Path) -> None:
    run = RunWriter.start(store, kind="eval", name="eval-larger", config={})
    rows = [
        {
            "task_id": f"t{i}",
            "sample": s,
            "reward": float(i % 2),
            "is_correct": i % 2 == 1,
            "output": f"answer {i}",
            "info": {"i": i},
            "error": None,
            "termination_reason": "env_done",
        }
        for i in range(3)
        for s in range(2)
    ]
    run.add_eval_results(rows)
    run.add_eval_results([{**rows[0], "reward": 1.0, "is_correct": True}])  # a re-run sample replaces its row
    run.log(0, {"eval/accuracy": 4 / 6, "eval/n": 6})
    run.finish({"accuracy": 4 / 6})
    got = StoreReader(store).evals(run.id, limit=2, offset=0)
    assert got["total"] == 6 and got["evals"] == [{"step": 0, "accuracy": pytest.approx(4 / 6), "n": 6}]
    assert got["results"][0] == {
        "task_id": "t0",
        "sample": 0,
        "reward": 1.0,
        "is_correct": True,
        "output": "answer 0",
        "info": {"i": 0},
        "error": None,
        "termination_reason": "env_done",
    }
    assert StoreReader(store).evals(run.id, limit=10, offset=5)["results"][0]["task_id"] == "t2"


def test_long_series_are_thinned_keeping_the_last_point(store: Path) -> None:
    run = RunWriter.start(store, kind="train", name="r", config={})
    for step in range(1, 4001):
        metrics = {"loss": float(step)}
        if step % 8 == 0:
            metrics["eval/accuracy"] = step / 4000
        if round(step**0.5) ** 2 == step or step % 97 == 0:  # irregular steps
            metrics["odd"] = float(step)
        run.log(step, metrics)
    reader = StoreReader(store)
    series = reader.metrics(run.id, max_points=100)["series"]
    assert (
        100 <= len(series["loss"]) <= 101
        and series["loss"][0] == [1, 1.0]
        and series["loss"][-1] == [4000, 4000.0]
    )
    assert [s for s, _ in series["loss"][:3]] == [1, 41, 81]
    evals = [
        s for s, _ in series["eval/accuracy"]
    ]  # every 5th of 500 evals, on their own steps, and the last
    assert len(evals) == 101 and evals[:3] == [8, 48, 88] and evals[-2:] == [3968, 4000]
    assert 25 <= len(series["odd"]) <= 101 and series["odd"][-1][0] == 3977  # 41 * 97
    assert len(reader.metrics(run.id, ["loss"], max_points=None)["series"]["loss"]) == 4000
    assert reader.metrics(run.id, ["loss"], after_step=3990, max_points=5)["series"]["loss"][-1] == [
        4000,
        4000.0,
    ]
    run.finish()


def test_sampling_keeps_failed_and_truncated_episodes_and_spreads_over_groups() -> None:
    episodes = [_episode(f"task{g}", float(i % 2)) for g in range(4) for i in range(8)]
    failed = [
        _episode("task0", 0.0, reason=TerminationReason.ERROR, error="boom"),
        _episode("task1", 0.0, reason=TerminationReason.TIMEOUT),
        _episode("task2", 0.0, reason=TerminationReason.MAX_RESPONSE_LENGTH),
    ]
    everything = episodes[:5] + failed + episodes[5:]
    kept = sample_episodes(everything, 6)
    assert all(f in kept for f in failed) and len(kept) == 6 + len(failed)
    per_group = {g: sum(e.task_id == f"task{g}" and e not in failed for e in kept) for g in range(4)}
    assert sorted(per_group.values()) == [1, 1, 2, 2]  # evenly across groups
    group0 = [e.reward for e in kept if e.task_id == "task0" and e not in failed]
    if len(group0) == 2:
        assert sorted(group0) == [0.0, 1.0]  # the best and the worst of a group
    assert [everything.index(e) for e in kept] == sorted(everything.index(e) for e in kept)  # input order
    assert sample_episodes(everything, 0) == failed
    assert len(sample_episodes(episodes, 100)) == len(episodes)


def test_a_missing_or_empty_store_has_no_runs(tmp_path: Path) -> None:
    reader = StoreReader(tmp_path / "nothing-here.db")
    assert reader.runs() == []
    with pytest.raises(NotFound, match="no run 'x'"):
        reader.run("x")
    with pytest.raises(NotFound, match="no episode 'e'"):
        reader.episode("e")
    assert not (tmp_path / "nothing-here.db").exists()  # reading creates nothing
    sqlite3.connect(tmp_path / "empty.db").close()
    assert StoreReader(tmp_path / "empty.db").runs() == []


def test_a_store_from_a_newer_rllm_is_refused(store: Path) -> None:
    RunWriter.start(store, kind="train", name="r", config={}).finish()
    with sqlite3.connect(store) as conn:
        conn.execute("PRAGMA user_version = 99")
    with pytest.raises(StoreError, match="newer rllm"):
        RunWriter.start(store, kind="train", name="r", config={})
    with pytest.raises(StoreError, match="newer rllm"):
        StoreReader(store).runs()


def test_an_unwritable_store_says_what_to_change(tmp_path: Path) -> None:
    (tmp_path / "a-directory").mkdir()
    with pytest.raises(StoreError, match="trainer.store"):
        RunWriter.start(tmp_path / "a-directory", kind="train", name="r", config={})


def test_run_ids() -> None:
    rid = new_run_id("gsm8k / lora r=8")
    name, date, clock, tag = rid.rsplit("-", 3)
    assert name == "gsm8k_lora_r_8" and len(date) == 8 and len(clock) == 6 and len(tag) == 4
