"""Train the model behind the OpenAI Agents SDK calculator agent in agent.py, through the gateway.

The trainer serves its in-process engine behind an embedded gateway on loopback; every episode is a
gateway session, the agent's Responses API calls (a tool call, then an answer after the tool result) are
translated to chat, recorded token-faithfully and merged into one training sequence with the tool result masked out, and the reward
is whether the final answer is the right number.

The tasks are multiplications of two 2-3 digit numbers: beyond a 135M model's mental arithmetic, easy
with the calculator, so the reward goes up only if the model learns to call the tool and copy its result.

    .venv/bin/python examples/openai_agents_sdk/train.py [key=value ...]      e.g. trainer.steps=16
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import rllm
from rllm.data.builtin import product_tasks
from rllm.rewards.basic import single_number_match
from rllm.sdk.tool_use import held_out_tool_use, tool_use_signals

sys.path.insert(0, str(Path(__file__).parent))
from agent import build_agent, make_client, solve

# Small defaults for this example; anything here can be overridden on the command line.
DEFAULTS = [
    "trainer.name=openai-agents-sdk",
    "optim.lr=1e-3",  # the lr its measured runs (README) used: the default before it became 5e-4
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
    # and at most 1024 padded tokens a pass: a ~600-token row then trains alone (about 2 MB a token in
    # float32 on a CPU without bf16, as the tool template measured: docs/results.md, its memory section)
    "backend.micro_batch_tokens=1024",
    "eval.every_steps=0",  # held-out eval before and after only
    "eval.max_tokens=96",
    "data.train_size=2000",
    "data.test_size=32",
]


@rllm.rollout
async def calculator_agent(task: dict, config: rllm.AgentConfig) -> str:
    # The agent is built per episode: config.base_url is this episode's gateway session.
    # Its client lives as long as the episode: its connections belong to this training step's event loop.
    async with make_client(config.base_url, config.api_key) as client:
        return await solve(build_agent(client, config.model), task["question"])


@rllm.evaluator
def grade(task: dict, episode: rllm.Episode) -> rllm.Outcome:
    correct = single_number_match(episode.info["output"] or "", task["ground_truth"])
    # tool_calls, tool_errors, used_tool: read from the tool results the agent sent back to the model
    return rllm.Outcome(reward=float(correct), is_correct=correct, signals=tool_use_signals(episode))


def main(overrides: list[str]) -> rllm.TrainResult:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for name in ("httpx", "httpx2", "transformers", "openai", "openai.agents"):
        logging.getLogger(name).setLevel(logging.WARNING)
    config = rllm.load_config(rllm.TrainConfig, None, [*DEFAULTS, *overrides])
    train, test = product_tasks(config.data.train_size, config.data.test_size, seed=config.trainer.seed)
    result = rllm.AgentTrainer(
        config, workflow=calculator_agent, evaluator=grade, train_tasks=train, test_tasks=test
    ).train()
    print(result.accuracy_line())
    if config.eval.before and config.eval.after and test:
        before, after = held_out_tool_use(result.run_dir / "traces.db", len(test))
        print(f"held-out episodes where the calculator ran: {before:.1%} -> {after:.1%}")
    print(f"traces: {result.run_dir / 'traces.db'}; final model: {result.final_model_dir}")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
