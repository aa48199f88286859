"""The ``rllm`` command line.

    rllm init NAME [--template T]              a new project: flow, evaluator, tasks, config, test
    rllm train [CONFIG.yaml] [key=value ...]   train (defaults: built-in model and task, LoRA GRPO;
                                               in a project: its ./rllm.yaml)
    rllm train --help-config                   every config key with its type, default and meaning
    rllm sft [CONFIG.yaml] [key=value ...]     supervised fine-tuning on a file of conversations (loss on
                                               the assistant turns; same backends; docs/sft.md)
    rllm eval DATASET [--model M | --base-url URL --model NAME] [--k K] [--max-examples N] [--output PATH]
                                               score a model on a dataset: accuracy, pass@k (resumable)
    rllm model pull smollm2-135m | list        fetch and list the built-in models
    rllm dataset list | pull | inspect | register | remove   manage datasets (built-in, local, hub catalog)
    rllm dataset from-eval RESULTS | from-run RUN [-o OUT.jsonl] [--correct-only] [--best-of K] ...
                                               curate recorded attempts into an SFT messages dataset
    rllm gateway --model MODEL [--port P] [--upstream URL ...] [--store PATH] [--api-key KEY]
                                               serve a model behind the trace-recording OpenAI gateway
    rllm ui [--port P] [--store PATH]          browse runs in a web UI (live metrics, episodes, tokens)
    rllm serve tinker --model MODEL [--port P] [--api-key KEY]
                                               the Tinker training + sampling API for the tinker SDK
    rllm replay RUN [--step N] [--checkpoint CKPT] [--bundle OUT.tar.gz]
                                               re-run a recorded step's batch (and loss) and check it
                                               equals the record; a bundle replays on another machine
    rllm profile RUN                           a run's bottlenecks: phase times, memory peaks, advice
    rllm check-template MODEL                  check a chat template for multi-turn token drift
    rllm version                               print the installed version

Each subcommand stores its handler as ``args.func``; a handler takes the parsed arguments and returns the
process exit code. Heavy imports (torch, transformers) happen inside handlers, so ``rllm --help`` is quick.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from rllm import __version__
from rllm.cli.check_template_cmd import add_check_template_parser
from rllm.cli.dataset_cmd import add_dataset_parser
from rllm.cli.eval_cmd import add_eval_parser
from rllm.cli.gateway_cmd import add_gateway_parser
from rllm.cli.init_cmd import add_init_parser
from rllm.cli.model_cmd import add_model_parser
from rllm.cli.profile_cmd import add_profile_parser
from rllm.cli.replay_cmd import add_replay_parser
from rllm.cli.serve_cmd import add_serve_parser
from rllm.cli.sft_cmd import add_sft_parser
from rllm.cli.train_cmd import add_train_parser
from rllm.cli.ui_cmd import add_ui_parser

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")

# Libraries that log routine chatter at INFO (HTTP requests, file locks, adapter setup): warnings only.
NOISY_LOGGERS = ("transformers", "httpx", "httpx2", "urllib3", "peft", "filelock", "huggingface_hub")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rllm",
        description="Train LLM agents with reinforcement learning.",
    )
    parser.add_argument("--version", action="version", version=f"rllm {__version__}")
    parser.add_argument(
        "--log-level",
        type=str.upper,
        choices=LOG_LEVELS,
        default="INFO",
        help="logging level (default: INFO)",
    )
    subparsers = parser.add_subparsers(
        dest="command",
        metavar="{init,train,sft,eval,replay,ui,gateway,serve,model,dataset,check-template,profile,version}",
        required=True,
    )
    train = add_train_parser(subparsers)
    # Also accepted after `train`; SUPPRESS keeps the subparser from overwriting `rllm --log-level X train`.
    train.add_argument(
        "--log-level",
        type=str.upper,
        choices=LOG_LEVELS,
        default=argparse.SUPPRESS,
        help="logging level (default: INFO)",
    )
    add_sft_parser(subparsers)
    add_eval_parser(subparsers)
    add_replay_parser(subparsers)
    add_init_parser(subparsers)
    add_ui_parser(subparsers)
    add_gateway_parser(subparsers)
    add_serve_parser(subparsers)
    add_model_parser(subparsers)
    add_dataset_parser(subparsers)
    add_check_template_parser(subparsers)
    add_profile_parser(subparsers)
    version = subparsers.add_parser("version", help="print the installed rllm version")
    version.set_defaults(func=_run_version)
    return parser


def _run_version(args: argparse.Namespace) -> int:
    print(f"rllm {__version__}")
    return 0


@contextmanager
def console_logging(level: str) -> Iterator[None]:
    """Log to stderr through rich at ``level`` for the duration of one command, then restore logging.

    Restoring matters when ``main`` is called in-process (tests, notebooks): the root logger is left as
    it was found.
    """
    from rich.console import Console
    from rich.logging import RichHandler

    root = logging.getLogger()
    # stderr, so stdout carries only what a command prints (the summary, a model directory) for scripts.
    handler = RichHandler(
        console=Console(stderr=True), show_path=False, rich_tracebacks=True, log_time_format="[%X]"
    )
    handler.setFormatter(logging.Formatter("%(message)s"))
    saved_root_level = root.level
    saved_levels = {name: logging.getLogger(name).level for name in NOISY_LOGGERS}
    root.addHandler(handler)
    root.setLevel(level)
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(max(logging.WARNING, logging.getLevelName(level)))
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(saved_root_level)
        for name, saved in saved_levels.items():
            logging.getLogger(name).setLevel(saved)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``rllm`` command line on ``argv`` (default: ``sys.argv[1:]``); return the exit code."""
    args = build_parser().parse_args(argv)
    try:
        with console_logging(args.log_level):
            return args.func(args)
    except KeyboardInterrupt:
        print("rllm: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
