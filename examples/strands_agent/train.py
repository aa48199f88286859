"""Train the model behind the Strands Agents calculator agent in agent.py, through the gateway.

The trainer serves its in-process engine behind an embedded gateway on loopback; every episode is a
gateway session, the agent's chat completions calls (a tool call, then an answer after the tool result)
are recorded token-faithfully and merged into one training sequence with the tool result masked out, and
the reward is whether the final answer is the right number.

The tasks are multiplications of two 2-3 digit numbers: beyond a 135M model's mental arithmetic, easy
with the calculator, so the reward goes up only if the model learns to call the tool and copy its result.

Strands' OpenAI provider pins openai<3, so this runs in its own venv (bash scripts/setup_strands.sh):

    .venv-strands/bin/python examples/strands_agent/train.py [key=value ...]      e.g. trainer.steps=16
"""

from __future__ import annotations

import logging
import random
import sys
from pathlib import Path
from typing import Any

import rllm
from rllm.gateway.traces import TraceStore
from rllm.rewards.basic import single_number_match

sys.path.insert(0, str(Path(__file__).parent))
from agent import build_agent, solve

# Small defaults for this example; anything here can be overridden on the command line.
DEFAULTS = [
    "trainer.name=strands-agent",
    "trainer.steps=8",
    "rollout.batch_size=4",
    "rollout.group_size=4",
    "rollout.max_tokens=96",  # per model call; a tool call is ~25 tokens
    # As in examples/langgraph_agent: at temperature 1 SmolLM2-135M invents tool names and JSON, so
    # groups carry almost no signal; 0.7 gives a mix of right and wrong attempts.
    "rollout.temperature=0.7",
    # The prompt (tool description + worked examples) is ~420 tokens: 16 such sequences in one
    # forward/backward took a run's peak RSS to 13.7 GB on CPU; 4 at a time, 7.1 GB, at the same speed.
    "backend.micro_batch_size=4",
    "eval.every_steps=0",  # held-out eval before and after only
    "eval.max_tokens=96",
    "data.train_size=2000",
    "data.test_size=32",
]

# The task family and the readers of the recorded tool calls below are examples/langgraph_agent/train.py's,
# line for line (that module cannot be imported here: it imports LangChain, which this venv lacks), except
# that calculator_ran knows Strands' "Unknown tool" result. They go when the cookbooks share one task
# module in rllm.

# Ways to ask for a product: the model has to write the expression for the tool itself.
QUESTIONS = [
    "What is {a} * {b}?",
    "Compute {a} times {b}.",
    "Multiply {a} by {b}.",
    "What is the product of {a} and {b}?",
]


def make_tasks(n_train: int, n_test: int, seed: int = 0) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Products `a * b` of 2-3 digit numbers, asked in several ways: a train and a disjoint held-out split."""
    rng = random.Random(seed)
    pairs: list[tuple[int, int]] = []
    seen: set[tuple[int, int]] = set()
    while len(pairs) < n_train + n_test:
        pair = (rng.randint(10, 999), rng.randint(10, 999))
        if pair not in seen and (pair[1], pair[0]) not in seen:
            seen.add(pair)
            pairs.append(pair)

    def task(split: str, i: int, a: int, b: int) -> dict[str, Any]:
        question = rng.choice(QUESTIONS).format(a=a, b=b)
        return {"task_id": f"mul-{split}-{i}", "question": question, "ground_truth": str(a * b)}

    test = [task("test", i, a, b) for i, (a, b) in enumerate(pairs[:n_test])]
    train = [task("train", i, a, b) for i, (a, b) in enumerate(pairs[n_test:])]
    return train, test


@rllm.rollout
async def calculator_agent(task: dict, config: rllm.AgentConfig) -> str:
    # The agent is built per episode: config.base_url is this episode's gateway session. Strands' OpenAI
    # provider opens (and closes) a client per model call, so nothing outlives the episode.
    agent = build_agent(config.base_url, config.api_key, config.model)
    return await solve(agent, task["question"])


def tool_results(messages: list[dict[str, Any]]) -> list[str]:
    """The tool results that follow the question (the last user message) in one model call's messages.

    Every model call sends the whole conversation so far, so these are the tool calls that ran before
    that call; the agent's worked examples come before the question and are not counted.
    """
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    return [str(m.get("content") or "") for m in messages[last_user + 1 :] if m.get("role") == "tool"]


def calculator_ran(result: str) -> bool:
    """False for the errors the tool or Strands return: "error: ..." (a bad expression), "Error: ..."
    (arguments Strands could not validate) and "Unknown tool: NAME"."""
    return not result.lower().startswith(("error", "unknown tool"))


@rllm.evaluator
def grade(task: dict, episode: rllm.Episode) -> rllm.Outcome:
    correct = single_number_match(episode.info["output"] or "", task["ground_truth"])
    # The episode's last model call saw every tool result of the episode.
    results = max(
        (tool_results(step.messages) for traj in episode.trajectories for step in traj.steps),
        key=len,
        default=[],
    )
    ran = sum(calculator_ran(r) for r in results)
    return rllm.Outcome(
        reward=float(correct),
        is_correct=correct,
        signals={"tool_calls": len(results), "tool_errors": len(results) - ran, "used_tool": float(ran > 0)},
    )


def held_out_tool_use(traces_db: Path, n_test: int) -> tuple[float, float]:
    """The share of held-out episodes in which the calculator ran (without an error), first and last eval.

    The trainer's eval reports accuracy only, so this reads the gateway's trace store: eval episodes are
    the sessions sampled greedily (temperature 0), the first `n_test` before training, the last after.
    """
    with TraceStore(traces_db) as store:
        used = []
        for session_id in store.sessions():
            info = store.session(session_id)
            if info is None or info.sampling.get("temperature") != 0.0:
                continue
            calls = [t.request.get("messages") or [] for t in store.list(session_id)]
            used.append(any(calculator_ran(r) for messages in calls for r in tool_results(messages)))
    if len(used) < 2 * n_test:
        return float("nan"), float("nan")
    return sum(used[:n_test]) / n_test, sum(used[-n_test:]) / n_test


def main(overrides: list[str]) -> rllm.TrainResult:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for name in ("httpx", "httpx2", "transformers", "openai", "strands"):
        logging.getLogger(name).setLevel(logging.WARNING)
    config = rllm.load_config(rllm.TrainConfig, None, [*DEFAULTS, *overrides])
    train, test = make_tasks(config.data.train_size, config.data.test_size, seed=config.trainer.seed)
    result = rllm.AgentTrainer(
        config, workflow=calculator_agent, evaluator=grade, train_tasks=train, test_tasks=test
    ).train()
    print(f"held-out accuracy: {result.initial_accuracy:.1%} -> {result.final_accuracy:.1%}")
    if config.eval.before and config.eval.after:
        before, after = held_out_tool_use(result.run_dir / "traces.db", len(test))
        print(f"held-out episodes where the calculator ran: {before:.1%} -> {after:.1%}")
    print(f"traces: {result.run_dir / 'traces.db'}; final model: {result.final_model_dir}")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
