"""The coordinator's warm start: supervised examples of its job done faithfully, from the model's own workers.

SmolLM2-135M does not copy a number out of its worker's wording ("The larger number is 82." -> 82) often
enough for RL to find: held to the final answer's grammar it listed its workers' numbers in 1 of 40 sampled
replies, and a 16-step RL run never learned it (docs/results.md). This script samples worker replies with
the model itself (each part goes to a worker role drawn at random, prompted in that role's style, at
temperature 1 as in training) on training tasks, and writes, per task, the coordinator's prompt with the
faithful answer (each worker's number, in order: ``faithful_example``) as a `messages` JSONL file for
``rllm sft``. The SFT model is then the starting point of the RL run:

    python examples/coordinator/warm_start.py --tasks 512 -o /tmp/coord_sft.jsonl
    rllm sft data.train_file=/tmp/coord_sft.jsonl trainer.steps=32 trainer.run_dir=/tmp/coord_sft
    rllm train examples/coordinator/config.yaml model.path=/tmp/coord_sft/sft/final_model

The workers' answers in the file are as right or wrong as the model's: the coordinator learns to pass on
what it is told, which is what ``coordinator_reward=contribution`` credits, not to solve the parts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.progress import Progress

from rllm.data.multi_part import multi_part_tasks
from rllm.inference.base import SamplingParams
from rllm.inference.local import LocalEngine
from rllm.models import resolve_model
from rllm.trainer.config import TrainConfig
from rllm.trainer.workflows import build_workflow
from rllm.utils.config import load_config
from rllm.workflows.coordinator import CoordinatorWorkflow, faithful_example

CONFIG = Path(__file__).with_name("config.yaml")


async def build_examples(
    workflow: CoordinatorWorkflow,
    engine: Any,
    tasks: list[dict[str, Any]],
    *,
    max_tokens: int,
    seed: int = 0,
    progress: Progress | None = None,
    on_example: Callable[[dict[str, Any]], None] | None = None,
) -> tuple[list[dict[str, Any]], int]:
    """One faithful example per task whose sampled worker replies all hold an integer; returns the examples
    (``task_id`` added, in task order) and how many tasks were skipped for a reply without one.
    ``on_example`` sees each example as soon as its task is done (what a long run has written so far)."""
    rng = random.Random(seed)
    roles = list(workflow.workers)
    bar = progress.add_task("worker replies", total=len(tasks)) if progress else None

    async def one(i: int, task: dict[str, Any]) -> dict[str, Any] | None:
        parts = task["metadata"]["parts"]
        chosen = [rng.choice(roles) for _ in parts]

        async def reply(j: int, role: str) -> str:
            prompt = engine.apply_chat_template(workflow.worker_messages(role, parts[j]))
            params = SamplingParams(temperature=1.0, max_tokens=max_tokens, seed=seed * 1_000_003 + i * 7 + j)
            return (await engine.generate(prompt, params))[0].text

        replies = await asyncio.gather(*(reply(j, role) for j, role in enumerate(chosen)))
        if progress is not None and bar is not None:
            progress.advance(bar)
        example = faithful_example(parts, list(replies))
        if example is None:
            return None
        example = {**example, "task_id": task["task_id"]}
        if on_example is not None:
            on_example(example)
        return example

    done = await asyncio.gather(*(one(i, t) for i, t in enumerate(tasks)))
    examples = [e for e in done if e is not None]
    return examples, len(done) - len(examples)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-o", "--output", required=True, help="the messages JSONL file to write")
    p.add_argument("--tasks", type=int, default=512, help="training tasks to sample worker replies for")
    p.add_argument("--config", default=str(CONFIG), help="the coordinator run's config (workers, model)")
    p.add_argument("--seed", type=int, default=1, help="task draw and sampling seed")
    p.add_argument("overrides", nargs="*", help="key=value overrides of the config, as rllm train takes")
    args = p.parse_args(argv)
    if args.tasks < 1:
        p.error(f"--tasks must be at least 1, got {args.tasks}")

    cfg = load_config(TrainConfig, args.config, args.overrides)
    workflow = build_workflow(cfg)
    if not isinstance(workflow, CoordinatorWorkflow):
        p.error(f"{args.config} runs workflow {cfg.workflow.name!r}: a coordinator config is needed")
    engine = LocalEngine.from_pretrained(resolve_model(cfg.model.path))
    tasks = multi_part_tasks("train", args.tasks, seed=args.seed)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        # Each example is appended as its task finishes, so a long run can be watched (wc -l) or cut short
        # with what it has; the finished file is rewritten in task order.
        with Progress() as progress, out.open("w") as partial:

            def write(example: dict[str, Any]) -> None:
                partial.write(json.dumps(example) + "\n")
                partial.flush()

            examples, skipped = asyncio.run(
                build_examples(
                    workflow,
                    engine,
                    tasks,
                    max_tokens=cfg.rollout.max_tokens,
                    seed=args.seed,
                    progress=progress,
                    on_example=write,
                )
            )
    finally:
        engine.close()
    with out.open("w") as f:
        for e in examples:
            f.write(json.dumps(e) + "\n")
    print(
        f"wrote {len(examples)} examples to {out} ({skipped} of {len(tasks)} tasks skipped: a worker reply "
        "held no integer to pass on)"
    )
    return 0 if examples else 1


if __name__ == "__main__":
    sys.exit(main())
