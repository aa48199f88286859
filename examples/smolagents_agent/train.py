"""Train the model behind the smolagents ToolCallingAgent in agent.py, through the gateway.

The trainer serves its in-process engine behind an embedded gateway on loopback; every episode is a
gateway session. ToolCallingAgent sends `tool_choice="required"` on every call, which the local engine
honours with a grammar: the reply is a call of one of the agent's tools whose arguments match its schema;
the tokens the grammar forced (the call's fixed text) are recorded as not sampled and never trained on
(`response_mask` 0). smolagents renders
its history as text ("Calling tools: [...]", "Observation: ..."), not as the tool-call tokens the model
wrote, so each model call is its own training sequence (counted in `assembly/drift_splits`).

The tasks are products of two 2-3 digit numbers; the reward is whether the final answer is the product.

    .venv/bin/python examples/smolagents_agent/train.py [key=value ...]      e.g. trainer.steps=8
"""

from __future__ import annotations

import asyncio
import logging
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import rllm
from rllm.data.builtin import PRODUCT_QUESTIONS, product_tasks
from rllm.rewards.basic import single_number_match

sys.path.insert(0, str(Path(__file__).parent))
from agent import build_agent, solve

# Small defaults for this example; anything here can be overridden on the command line.
DEFAULTS = [
    "trainer.name=smolagents-agent",
    "optim.lr=1e-3",  # the lr its measured runs (README) used: the default before it became 5e-4
    "trainer.steps=4",
    "rollout.batch_size=4",
    "rollout.group_size=4",
    "rollout.max_tokens=48",  # per model call; a forced call is ~25 tokens
    "rollout.temperature=0.7",
    "backend.micro_batch_size=4",
    # Each model call is its own row (280-720 tokens in a run's traces), dozens a step, and the
    # activations an update keeps cost ~2.5 MB a token on a float32 CPU, on top of what sampling holds (a run
    # of these defaults was at 4.9 GB RSS in its held-out eval; runs before them peaked at 6.3-12.7 GB).
    # Recomputing them keeps one layer's at a time, for a second forward; it needs share_prefix off
    # (docs/profiling.md).
    "backend.gradient_checkpointing=true",
    "backend.share_prefix=false",
    "eval.every_steps=0",  # held-out eval before and after only
    "eval.max_tokens=48",
    "data.train_size=2000",
    "data.test_size=16",
]
# The first three of the cookbooks' four wordings of a product.
QUESTIONS = PRODUCT_QUESTIONS[:3]

# smolagents agents are synchronous: each episode runs its agent in a thread of its own (the default
# executor has only a few threads, which would hold back the episodes whose calls batch together).
_AGENT_THREADS = ThreadPoolExecutor(max_workers=64, thread_name_prefix="smolagents")


@rllm.rollout
async def calculator_agent(task: dict, config: rllm.AgentConfig) -> str:
    # The agent is built per episode: config.base_url is this episode's gateway session. One call per model
    # turn (parallel_tool_calls=False, as OpenAI's API spells it): under tool_choice "required" the grammar
    # otherwise lets a second call follow the first, and the small model starts one in most replies, which
    # max_tokens then cuts mid-call, so the reply parses as no call at all (measured at 5735192: 0 of 46
    # held-out and 1 of 41 training calls parsed; docs/results.md).
    agent = build_agent(
        config.base_url, config.api_key, config.model, max_tokens=48, parallel_tool_calls=False
    )
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_AGENT_THREADS, solve, agent, task["question"])


def _calculate_calls(episode: rllm.Episode) -> list[str]:
    """The agent's `calculate` calls as smolagents wrote them into the history it sent back to the model
    ("Calling tools: [{... 'name': 'calculate', 'arguments': {...}}]" after each call), from the longest
    history of the episode."""
    histories = [step.messages for traj in episode.trajectories for step in traj.steps]
    longest = max(histories, key=len, default=[])
    texts = (str(m.get("content") or "") for m in longest)
    return [text for text in texts if "'name': 'calculate'" in text]


def calculator_calls(episode: rllm.Episode) -> int:
    """How many times the agent called `calculate`."""
    return len(_calculate_calls(episode))


def copied_operands(episode: rllm.Episode, question: str) -> bool:
    """Whether some `calculate` call's arguments hold both of the question's numbers."""
    operands = re.findall(r"\d+", question)
    return any(
        all(op in re.findall(r"\d+", call.split("'arguments'", 1)[-1]) for op in operands)
        for call in _calculate_calls(episode)
    )


# Shaping: a wrong final answer after a calculator call on the question's numbers earns this much. Without
# it almost no sampled group holds a right episode (the untrained model mostly calls final_answer at once
# with an operand), so almost every update is skipped; with it, calling the calculator first is learnable,
# and the final answer (reward 1) stays worth more. Accuracy (`is_correct`) counts right answers only.
CALL_REWARD = 0.25


@rllm.evaluator
def grade(task: dict, episode: rllm.Episode) -> rllm.Outcome:
    correct = single_number_match(episode.info["output"] or "", task["ground_truth"])
    called = copied_operands(episode, task["question"])
    reward = 1.0 if correct else CALL_REWARD if called else 0.0
    signals = {"calculator_calls": calculator_calls(episode), "copied_operands": float(called)}
    return rllm.Outcome(reward=reward, is_correct=correct, signals=signals)


def main(overrides: list[str]) -> rllm.TrainResult:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for name in ("httpx", "httpx2", "transformers", "openai", "smolagents"):
        logging.getLogger(name).setLevel(logging.WARNING)
    config = rllm.load_config(rllm.TrainConfig, None, [*DEFAULTS, *overrides])
    train, test = product_tasks(
        config.data.train_size, config.data.test_size, seed=config.trainer.seed, questions=QUESTIONS
    )
    result = rllm.AgentTrainer(
        config, workflow=calculator_agent, evaluator=grade, train_tasks=train, test_tasks=test
    ).train()
    print(result.accuracy_line())
    print(f"traces: {result.run_dir / 'traces.db'}; final model: {result.final_model_dir}")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
