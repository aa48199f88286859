"""Train the model behind the LangGraph calculator agent in agent.py, through the gateway.

The trainer serves its in-process engine behind an embedded gateway on loopback; every episode is a
gateway session, the agent's model calls (a tool call, then an answer after the tool result) are recorded
token-faithfully and merged into one training sequence with the tool result masked out, and the reward
is whether the final answer is the right number.

The tasks are multiplications of two 2-3 digit numbers: beyond a 135M model's mental arithmetic, easy
with the calculator, so the reward goes up only if the model learns to call the tool and copy its result.

    .venv/bin/python examples/langgraph_agent/train.py [key=value ...]      e.g. trainer.steps=16
"""

from __future__ import annotations

import logging
import random
import sys
from pathlib import Path
from typing import Any

import rllm
from rllm.gateway.traces import TraceStore
from rllm.rewards.basic import number_match

sys.path.insert(0, str(Path(__file__).parent))
from agent import build_agent, solve

# Small defaults for this example; anything here can be overridden on the command line.
DEFAULTS = [
    "trainer.name=langgraph-agent",
    "trainer.steps=8",
    "rollout.batch_size=4",
    "rollout.group_size=4",
    "rollout.max_tokens=96",  # per model call; a tool call is ~25 tokens
    "eval.every_steps=0",  # held-out eval before and after only
    "eval.max_tokens=96",
    "data.train_size=2000",
    "data.test_size=32",
]


def make_tasks(n_train: int, n_test: int, seed: int = 0) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Multiplication questions `a * b` with 2-3 digit factors: a train split and a disjoint held-out split."""
    rng = random.Random(seed)
    pairs: list[tuple[int, int]] = []
    seen: set[tuple[int, int]] = set()
    while len(pairs) < n_train + n_test:
        pair = (rng.randint(10, 999), rng.randint(10, 999))
        if pair not in seen and (pair[1], pair[0]) not in seen:
            seen.add(pair)
            pairs.append(pair)

    def task(split: str, i: int, a: int, b: int) -> dict[str, Any]:
        return {"task_id": f"mul-{split}-{i}", "question": f"What is {a} * {b}?", "answer": str(a * b)}

    test = [task("test", i, a, b) for i, (a, b) in enumerate(pairs[:n_test])]
    train = [task("train", i, a, b) for i, (a, b) in enumerate(pairs[n_test:])]
    return train, test


@rllm.rollout
async def calculator_agent(task: dict, config: rllm.AgentConfig) -> str:
    # The agent is built per episode: config.base_url is this episode's gateway session.
    agent = build_agent(config.base_url, config.api_key, config.model)
    return await solve(agent, task["question"])


def tool_results(episode: rllm.Episode) -> int:
    """How many tool results the agent fed back to the model in this episode.

    Every model call sends the whole conversation so far, so the most `tool` messages any recorded call
    carried is the number of tool calls that actually ran.
    """
    return max((sum(m.get("role") == "tool" for m in step.messages)
                for traj in episode.trajectories for step in traj.steps), default=0)


@rllm.evaluator
def grade(task: dict, episode: rllm.Episode) -> rllm.EvalResult:
    answer = episode.info["output"] or ""
    correct = number_match(answer, task["answer"])
    calls = tool_results(episode)
    return rllm.EvalResult(reward=float(correct), is_correct=correct,
                           signals={"tool_calls": calls, "used_tool": float(calls > 0)})


def held_out_tool_use(traces_db: Path, n_test: int) -> tuple[float, float]:
    """The share of held-out episodes in which the calculator ran, in the first and the last eval.

    The trainer's eval reports accuracy only, so this reads the gateway's trace store: eval episodes are
    the sessions sampled greedily (temperature 0), the first `n_test` before training, the last after.
    """
    with TraceStore(traces_db) as store:
        used = []
        for session_id in store.sessions():
            info = store.session(session_id)
            if info is None or info.sampling.get("temperature") != 0.0:
                continue
            traces = store.list(session_id)
            used.append(any(m.get("role") == "tool" for t in traces for m in t.request.get("messages") or []))
    if len(used) < 2 * n_test:
        return float("nan"), float("nan")
    return sum(used[:n_test]) / n_test, sum(used[-n_test:]) / n_test


def main(overrides: list[str]) -> rllm.TrainResult:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for name in ("httpx", "transformers", "openai"):
        logging.getLogger(name).setLevel(logging.WARNING)
    config = rllm.load_config(rllm.TrainConfig, None, [*DEFAULTS, *overrides])
    train, test = make_tasks(config.data.train_size, config.data.test_size, seed=config.trainer.seed)
    result = rllm.AgentTrainer(config, workflow=calculator_agent, evaluator=grade, train_tasks=train,
                               test_tasks=test).train()
    print(f"held-out accuracy: {result.initial_accuracy:.1%} -> {result.final_accuracy:.1%}")
    if config.eval.before and config.eval.after:
        before, after = held_out_tool_use(result.run_dir / "traces.db", len(test))
        print(f"held-out episodes where the calculator ran: {before:.1%} -> {after:.1%}")
    print(f"traces: {result.run_dir / 'traces.db'}; final model: {result.final_model_dir}")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
