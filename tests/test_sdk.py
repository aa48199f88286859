"""The SDK end to end: @rllm.rollout flows using the real openai client against a real gateway on
loopback, run by the workflow runner, traces assembled into steps, rewards from @rllm.evaluator."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import rllm
from rllm.gateway.app import create_app
from rllm.gateway.server import GatewayServer
from rllm.gateway.traces import TraceStore
from rllm.inference.base import SamplingParams
from rllm.inference.local import LocalEngine
from rllm.runner.workflow_runner import WorkflowRunner
from rllm.sdk import AgentConfig, GatewayWorkflow
from rllm.trainer.agent_trainer import AgentTrainer


@pytest.fixture(scope="module")
def gateway(
    tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, LocalEngine, TraceStore]]:
    engine = LocalEngine.from_pretrained(str(tiny_model_dir), device="cpu", dtype="float32", batch_wait_ms=2)
    store = TraceStore(tmp_path_factory.mktemp("sdk") / "traces.db")
    with GatewayServer(create_app(engine, store, model_name="tiny")) as srv:
        yield srv.url, engine, store
    store.close()


def _run(
    workflow: Any, engine: LocalEngine, tasks: list[dict], group_size: int = 1, **sampling: Any
) -> list[rllm.Episode]:
    params = SamplingParams(temperature=1.0, max_tokens=6, seed=11, **sampling)
    eng = WorkflowRunner(workflow, engine, params, show_progress=False)
    return asyncio.run(eng.run_tasks(tasks, group_size=group_size))


@rllm.rollout
def plain_agent(task: dict, config: AgentConfig) -> str:
    """An agent as anyone writes it: the sync openai client, no rllm imports inside."""
    import openai

    client = openai.OpenAI(base_url=config.base_url, api_key=config.api_key)
    resp = client.chat.completions.create(
        model=config.model, messages=[{"role": "user", "content": task["q"]}], temperature=0.2
    )  # the session's training temperature wins
    return resp.choices[0].message.content


@rllm.evaluator
def length_reward(task: dict, episode: rllm.Episode) -> rllm.Outcome:
    text = episode.info["output"]
    return rllm.Outcome(
        reward=float(len(text) % 2), is_correct=len(text) % 2 == 1, signals={"chars": len(text)}
    )


def test_rollout_through_gateway_builds_token_faithful_episodes(gateway: tuple) -> None:
    url, engine, store = gateway
    wf = GatewayWorkflow(plain_agent, length_reward, gateway_url=url, model="tiny")
    episodes = _run(
        wf, engine, [{"task_id": "t1", "q": "Hello"}, {"task_id": "t2", "q": "Bye"}], group_size=2
    )
    assert [e.task_id for e in episodes] == ["t1", "t1", "t2", "t2"]
    for ep in episodes:
        assert not ep.failed, ep.error
        (traj,) = ep.trajectories
        (step,) = traj.steps
        (trace,) = store.list(ep.id)
        assert step.prompt_ids == trace.prompt_token_ids and step.response_ids == trace.completion_token_ids
        assert step.logprobs == trace.logprobs and step.response_mask == [1] * len(step.response_ids)
        assert engine.tokenizer.decode(step.response_ids, skip_special_tokens=True) == ep.info["output"]
        assert ep.reward == float(len(ep.info["output"]) % 2) and step.reward == ep.reward
        assert ep.metrics["signal/chars"] == len(ep.info["output"])
        assert trace.request["sampling_params"]["temperature"] == 1.0  # the trainer's, not the agent's 0.2
    # Each episode got its own seed, so the two attempts at a task are different samples.
    seeds = {store.list(e.id)[0].request["sampling_params"]["seed"] for e in episodes}
    assert len(seeds) == 4


@rllm.rollout
async def two_turn_agent(task: dict, config: AgentConfig) -> float:
    """Async client, two turns; the second call carries the first reply back (token-faithful merge)."""
    client = config.async_client()
    messages = [{"role": "user", "content": task["q"]}]
    first = await client.chat.completions.create(model=config.model, messages=messages)
    messages += [
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "Again"},
    ]
    await client.chat.completions.create(model=config.model, messages=messages)
    await client.close()
    return 1.0


def test_multi_turn_calls_merge_into_one_masked_sequence(gateway: tuple) -> None:
    url, engine, store = gateway
    wf = GatewayWorkflow(two_turn_agent, gateway_url=url, model="tiny")
    # stop on eos only and a short reply: the template renders the reply back as the same tokens when the
    # sampled text re-tokenizes to itself, which the assertions below check trace by trace.
    (ep,) = _run(wf, engine, [{"task_id": "mt", "q": "Hi"}])
    assert not ep.failed, ep.error
    t1, t2 = store.list(ep.id)
    steps = ep.trajectories[0].steps
    if (
        t2.prompt_token_ids[: len(t1.prompt_token_ids) + len(t1.completion_token_ids)]
        == t1.prompt_token_ids + t1.completion_token_ids
    ):
        (step,) = steps
        n_env = len(t2.prompt_token_ids) - len(t1.prompt_token_ids) - len(t1.completion_token_ids)
        assert step.response_mask == [1] * len(t1.completion_token_ids) + [0] * n_env + [1] * len(
            t2.completion_token_ids
        )
        assert step.response_ids == t2.prompt_token_ids[len(t1.prompt_token_ids) :] + t2.completion_token_ids
        assert ep.metrics["assembly/merged_calls"] == 1
    else:  # the reply was cut by max_tokens, so history has an <|im_end|> the model never sampled: a split
        assert len(steps) == 2 and ep.metrics["assembly/drift_splits"] == 1


@rllm.rollout
def solver_judge(task: dict, config: AgentConfig) -> rllm.Outcome:
    solver = config.client("solver")
    answer = solver.completions.create(model=config.model, prompt=task["q"], max_tokens=3).choices[0].text
    judge = config.client("judge")
    verdict = (
        judge.completions.create(model=config.model, prompt=f"Is {answer!r} right?", max_tokens=2)
        .choices[0]
        .text
    )
    return rllm.Outcome(reward=1.0, role_rewards={"solver": 1.0, "judge": 0.0}, info={"verdict": verdict})


def test_roles_get_their_own_trajectories_and_rewards(gateway: tuple) -> None:
    url, engine, _ = gateway
    (ep,) = _run(
        GatewayWorkflow(solver_judge, gateway_url=url, model="tiny"), engine, [{"task_id": "sj", "q": "1+1="}]
    )
    assert not ep.failed, ep.error
    by = {t.name: t for t in ep.trajectories}
    assert set(by) == {"solver", "judge"}
    assert by["solver"].reward == 1.0 and by["judge"].reward == 0.0
    assert all(len(t.steps) == 1 for t in by.values())


def test_flow_errors_fail_only_their_episode(gateway: tuple) -> None:
    url, engine, _ = gateway

    @rllm.rollout
    def broken(task: dict, config: AgentConfig) -> float:
        if task["task_id"] == "bad":
            raise RuntimeError("tool crashed")
        return 0.5

    eps = _run(
        GatewayWorkflow(broken, gateway_url=url, model="tiny"),
        engine,
        [{"task_id": "bad"}, {"task_id": "good"}],
    )
    assert eps[0].failed and "tool crashed" in (eps[0].error or "")
    assert not eps[1].failed and eps[1].reward == 0.5


def test_decorators_check_their_functions() -> None:
    with pytest.raises(TypeError, match=r"\(task, config\)"):
        rllm.rollout(lambda task: None)
    with pytest.raises(TypeError, match=r"\(task, episode\)"):
        rllm.evaluator(lambda: 1.0)

    @rllm.evaluator
    def as_dict(task: dict, episode: rllm.Episode) -> dict:
        return {"reward": 0.25, "signals": {"x": 1.0}}

    result = asyncio.run(as_dict.score({}, rllm.Episode(task_id="t")))
    assert result.reward == 0.25 and result.signals == {"x": 1.0}
    config = AgentConfig(base_url="http://h/sessions/e/v1", model="m", session_id="e", gateway_url="http://h")
    assert config.role_url("judge") == "http://h/sessions/e:judge/v1"
    with pytest.raises(ValueError):
        config.role_url("a:b")


def test_trainer_learns_through_the_gateway(tmp_path: Path) -> None:
    """The fast learning test's task, written as an openai-client agent: the trainer serves its engine
    behind an embedded gateway, and GRPO still goes from chance to solved."""
    from test_learning import N_TASKS, TASKS, _config, make_tiny_vocab_model

    @rllm.rollout
    async def agent(task: dict, config: AgentConfig) -> str:
        client = config.async_client()
        resp = await client.completions.create(model=config.model, prompt=task["prompt_ids"], max_tokens=1)
        await client.close()
        return resp.choices[0].text.strip()

    @rllm.evaluator
    def correct(task: dict, episode: rllm.Episode) -> bool:
        return episode.info["output"] == task["task_id"].replace("q", "a")

    model_dir = make_tiny_vocab_model(tmp_path / "model")
    cfg = _config(model_dir, tmp_path / "runs", 30)
    result = AgentTrainer(cfg, workflow=agent, evaluator=correct, train_tasks=TASKS, test_tasks=TASKS).train()
    records = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    rewards = [r["reward/mean"] for r in records if "reward/mean" in r]
    assert rewards[0] < 0.3 and sum(rewards[-3:]) / 3 >= 0.9, rewards
    assert result.final_accuracy == 1.0
    assert records[-1]["assembly/calls"] == 1.0
    with TraceStore(
        result.run_dir / "traces.db"
    ) as store:  # every call is on record, with its weight version
        versions = {t.weight_version for s in store.sessions()[-4:] for t in store.list(s)}
    assert versions == {30} and N_TASKS == 4


def test_flow_may_return_its_own_trajectories(gateway: tuple) -> None:
    url, engine, _ = gateway

    @rllm.rollout
    async def labelled(task: dict, config: AgentConfig) -> list[rllm.Trajectory]:
        client = config.async_client()
        await client.completions.create(model=config.model, prompt="a", max_tokens=2)
        await client.completions.create(model=config.model, prompt="b", max_tokens=2)
        wf = GatewayWorkflow(labelled, gateway_url=config.gateway_url, model=config.model)
        traces = await wf.read_traces(config.session_id)
        from rllm.runner.assembly import assemble_steps

        (first, second), _ = assemble_steps(traces)
        return [
            rllm.Trajectory(name="proposer", steps=[first]),
            rllm.Trajectory(name="critic", steps=[second]),
        ]

    @rllm.evaluator
    def score(task: dict, episode: rllm.Episode) -> rllm.Outcome:
        return rllm.Outcome(reward=1.0, role_rewards={"critic": -1.0})

    (ep,) = _run(
        GatewayWorkflow(labelled, score, gateway_url=url, model="tiny"), engine, [{"task_id": "own"}]
    )
    assert not ep.failed, ep.error
    assert {t.name: t.reward for t in ep.trajectories} == {"proposer": 1.0, "critic": -1.0}
