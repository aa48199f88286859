"""``rllm eval DATASET``: score a model (local, or any OpenAI-compatible server) on a dataset.

    rllm eval larger --max-examples 100                      # the built-in model, greedy, accuracy
    rllm eval gsm8k --k 8 --max-tokens 1024                  # 8 samples per item: pass@1..8, mean@8
    rllm eval math500 --base-url http://host:8000/v1 --model Qwen/Qwen3-8B
    rllm eval larger --flow my_agent.py:solve                # your own @rllm.rollout flow

Prints a summary table (``accuracy``, ``pass@K``, ``mean@K`` ...) and writes one JSON line per sample to
``--output`` (default ``evals/DATASET-SPLIT-MODEL.jsonl``), plus ``.summary.json`` and the gateway's
``.traces.db`` beside it. Run the same command again to resume an interrupted eval. The eval is also
recorded as a run in the run store (``--store``; ``rllm ui`` shows it), unless ``--no-store``.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any


def add_eval_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "eval",
        help="evaluate a model on a dataset (accuracy, pass@k)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "dataset", help="a dataset name: built-in, registered, or from the catalog (rllm dataset list)"
    )
    p.add_argument(
        "--model",
        default=None,
        help="the model: a built-in name or a local path (default smollm2-135m); with --base-url, "
        "the name the server knows it by",
    )
    p.add_argument(
        "--base-url", default=None, help="an OpenAI-compatible server to evaluate instead of a local model"
    )
    p.add_argument("--api-key", default=None, help="API key for --base-url")
    p.add_argument("--split", default="test", help="dataset split (default: test)")
    p.add_argument("--max-examples", type=int, default=None, help="evaluate the first N items only")
    p.add_argument("--k", type=int, default=1, help="report pass@K (samples per item default to K)")
    p.add_argument("--n", type=int, default=None, help="samples per item, >= K (default: K)")
    p.add_argument(
        "--temperature",
        type=float,
        default=None,
        help="sampling temperature (default: 0 for one sample per item, 0.6 for several)",
    )
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--max-tokens", type=int, default=1024, help="most tokens per reply (default 1024)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--concurrency", type=int, default=32, help="episodes in flight at once (default 32)")
    p.add_argument("--timeout-s", type=float, default=None, help="time limit per episode")
    p.add_argument(
        "--output", type=Path, default=None, help="results JSONL (default evals/DATASET-SPLIT-MODEL.jsonl)"
    )
    p.add_argument("--no-resume", action="store_true", help="start over instead of resuming --output")
    p.add_argument(
        "--store",
        type=Path,
        default=None,
        help="record the eval as a run in this run store for `rllm ui` (default: $RLLM_STORE, else "
        "runs/rllm.db)",
    )
    p.add_argument("--no-store", action="store_true", help="do not record the eval in the run store")
    p.add_argument(
        "--flow", default=None, help="your @rllm.rollout flow as module:function or path.py:function"
    )
    p.add_argument(
        "--evaluator",
        default=None,
        help="your @rllm.evaluator as module:function or path.py:function (default: the dataset's reward)",
    )
    p.add_argument(
        "--reward", default=None, help="score with this reward instead of the dataset's (see docs/rewards.md)"
    )
    p.add_argument("--system-prompt", default=None, help="a system message for the built-in chat flow")
    p.add_argument(
        "--max-turns",
        type=int,
        default=None,
        help="an environment's dataset: most turns per episode (default: the environment's eval setting)",
    )
    p.add_argument(
        "--history-turns",
        default=None,
        help="an environment's dataset, for an environment with this option: earlier (observation, "
        "reply) turns kept in the prompt, or 'all' (default: the environment's, e.g. 0)",
    )
    p.add_argument("--device", default="auto", help="local model device (auto, cpu, cuda)")
    p.add_argument("--dtype", default="auto", help="local model dtype (auto, float32, bfloat16)")
    p.set_defaults(func=run_eval_command)
    return p


def _int_option(flag: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{flag} takes a whole number or 'all', got {value!r}") from None


def default_output(dataset: str, split: str, model: str) -> Path:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", model.rstrip("/").split("/")[-1] if "/" in model else model)
    return Path("evals") / f"{dataset}-{split}-{slug}.jsonl"


def check_names(args: argparse.Namespace) -> None:
    """The names an eval gives (dataset, split, reward) are refused before the dataset or the model loads,
    each in one line with a did-you-mean (``DatasetNotFoundError``, ``UnknownRewardError``)."""
    # with the registry and the rewards: not at `rllm --help`
    from rllm.data.registry import DatasetNotFoundError, DatasetRegistry
    from rllm.rewards.registry import UnknownRewardError, reward_names
    from rllm.utils.config import did_you_mean, unknown_name

    info = DatasetRegistry().info(args.dataset)
    if args.split not in info.splits:
        raise DatasetNotFoundError(
            f"dataset {args.dataset!r} has no split {args.split!r}"
            + did_you_mean(args.split, info.splits)
            + f" (it has {', '.join(info.splits)})"
        )
    if args.reward is not None and args.reward not in reward_names():
        raise UnknownRewardError(unknown_name("reward", args.reward, reward_names()))
    if args.reward is None and info.reward is not None and info.reward not in reward_names():
        raise UnknownRewardError(
            f"dataset {args.dataset!r} is scored by reward {info.reward!r}, which is not registered: pass "
            "--reward NAME or --evaluator"
        )


def run_eval_command(args: argparse.Namespace) -> int:
    # Imported here: the runner pulls in the gateway (Starlette, uvicorn) and the store (numpy), which
    # `rllm --help` should not wait for.
    from rich.console import Console

    from rllm.envs.registry import is_env
    from rllm.eval.datasets import eval_tasks
    from rllm.eval.flows import chat_flow, env_flow, reward_evaluator
    from rllm.eval.runner import EvalSpec, run_eval
    from rllm.rewards.instructions import answer_instruction
    from rllm.rewards.registry import get_reward
    from rllm.sandbox import SandboxUnavailable
    from rllm.store import StoreError, default_store_path
    from rllm.utils.imports import load_object

    if args.base_url and not args.model:
        print("--base-url needs --model NAME: the model name the server serves", file=sys.stderr)
        return 2
    model = args.model or "smollm2-135m"
    try:
        check_names(args)
        tasks, reward_name = eval_tasks(args.dataset, args.split, args.max_examples)
        reward_name = args.reward or reward_name
        # An environment's dataset is played against its environment, which scores itself.
        plays_env = is_env(args.dataset) and not (args.flow or args.reward)
        game_options = {
            key: value
            for key, value in (("max_turns", args.max_turns), ("history_turns", args.history_turns))
            if value is not None
        }
        if game_options and not plays_env:
            flags = ", ".join("--" + key.replace("_", "-") for key in game_options)
            raise ValueError(
                f"{flags} set(s) options of an environment's game; it does not apply to this flow"
            )
        if "history_turns" in game_options:
            history = game_options["history_turns"]
            game_options["history_turns"] = (
                None if history == "all" else _int_option("--history-turns", history)
            )
        if args.flow:
            flow = load_object(args.flow, what="--flow")
        elif plays_env:
            flow = env_flow(args.dataset, **game_options)
        else:
            flow = chat_flow(answer_instruction(reward_name), args.system_prompt)
        if args.evaluator:
            evaluator_fn = load_object(args.evaluator, what="--evaluator")
        elif plays_env:
            evaluator_fn = None  # the environment scores the episode
        elif reward_name is None:
            raise ValueError(f"dataset {args.dataset!r} names no reward: pass --reward NAME or --evaluator")
        else:
            evaluator_fn = reward_evaluator(get_reward(reward_name))
        spec = EvalSpec(
            dataset=args.dataset,
            output=args.output or default_output(args.dataset, args.split, model),
            model=model,
            base_url=args.base_url,
            api_key=args.api_key,
            split=args.split,
            max_examples=args.max_examples,
            k=args.k,
            n=args.n,
            temperature=args.temperature,
            top_p=args.top_p,
            max_tokens=args.max_tokens,
            seed=args.seed,
            concurrency=args.concurrency,
            timeout_s=args.timeout_s,
            resume=not args.no_resume,
            device=args.device,
            dtype=args.dtype,
            store=None if args.no_store else args.store or default_store_path(),
        )
        summary = run_eval(spec, tasks, flow, evaluator_fn)
    except (
        ValueError,
        KeyError,
        FileNotFoundError,
        AttributeError,
        ConnectionError,
        StoreError,
        SandboxUnavailable,
    ) as exc:  # SandboxUnavailable: the code reward refuses to grade without isolation
        print(f"rllm eval: {exc}", file=sys.stderr)
        return 2
    print_summary(summary, Console())
    return 0


def print_summary(summary: Any, console: Any) -> None:
    from rich.table import Table

    table = Table(title=f"{summary.dataset} · {summary.model}", show_header=True)
    table.add_column("metric")
    table.add_column("value", justify="right")
    n = summary.samples_per_item
    rows = [
        ("items", f"{summary.items}"),
        ("samples per item", f"{n}"),
        ("accuracy", f"{summary.accuracy:.4f}"),
    ]
    rows += [(f"pass@{k}", f"{v:.4f}") for k, v in summary.pass_at.items()]
    rows += [
        (f"mean@{n}", f"{summary.accuracy:.4f}"),
        ("mean reward", f"{summary.mean_reward:.4f}"),
        ("failed samples", f"{summary.failed}"),
        ("wall time", f"{summary.wall_s:.1f} s"),
        ("results", summary.output),
    ]
    for name, value in rows:
        table.add_row(name, value)
    console.print(table)
