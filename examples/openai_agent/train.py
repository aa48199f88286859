"""Train the built-in task ("which number is larger?") through the gateway, with the agent in agent.py.

The trainer serves its in-process engine behind an embedded gateway on loopback; every episode gets a
session, the agent's calls are recorded token-faithfully, and the evaluator's reward trains the policy.
Same model, data, algorithm and defaults as `rllm train`, so the two runs can be compared side by side.

    .venv/bin/python examples/openai_agent/train.py [key=value ...]      e.g. trainer.steps=8
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import rllm
from rllm.rewards.basic import single_number_match

sys.path.insert(0, str(Path(__file__).parent))
from agent import answer


@rllm.rollout
async def larger_agent(task: dict, config: rllm.AgentConfig) -> str:
    # config.async_client() is an openai.AsyncOpenAI pointed at this episode's gateway session.
    return await answer(config.async_client(), config.model, task["question"])


@rllm.evaluator
def grade(task: dict, episode: rllm.Episode) -> rllm.Outcome:
    correct = single_number_match(episode.info["output"], task["ground_truth"])
    return rllm.Outcome(reward=float(correct), is_correct=correct)


def main(overrides: list[str]) -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for name in ("httpx", "httpx2", "transformers"):
        logging.getLogger(name).setLevel(logging.WARNING)
    config = rllm.load_config(rllm.TrainConfig, None, ["trainer.name=openai-agent", *overrides])
    result = rllm.AgentTrainer(config, workflow=larger_agent, evaluator=grade).train()
    print(result.accuracy_line())
    print(f"traces: {result.run_dir / 'traces.db'}; final model: {result.final_model_dir}")


if __name__ == "__main__":
    main(sys.argv[1:])
