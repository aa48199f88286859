"""``rllm train``: load a TrainConfig, run AgentTrainer, print held-out accuracy before and after.

    rllm train                                   defaults: built-in model and task, LoRA GRPO
                                                 (in a project directory: its ./rllm.yaml, docs/init.md)
    rllm train my.yaml trainer.steps=100 lora.rank=16
    rllm train --help-config                     every key with its type, default and meaning

A config that cannot run (unknown key, wrong type, a combination the backend refuses, a model path that
does not exist) is reported at start-up, before anything heavy loads, as one line on stderr
(``rllm: error: ...``) with exit code 2.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from rllm.models import ModelPullError

if TYPE_CHECKING:
    from rllm.trainer.agent_trainer import TrainResult

logger = logging.getLogger(__name__)

EXIT_USAGE = 2  # the config cannot be used as given (argparse uses 2 for the same kind of mistake)
EXIT_FAILURE = 1  # the config is fine but something outside it failed (e.g. fetching the model)
_CONFIG_SUFFIXES = (".yaml", ".yml")


def add_train_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``rllm train`` on the top-level CLI's ``subparsers``; return the new parser."""
    parser = subparsers.add_parser(
        "train",
        help="train a model with RL (defaults: built-in model and task, LoRA GRPO on CPU)",
        description="Train with RL. The configuration is the defaults, then CONFIG.yaml if given (else "
        "./rllm.yaml when there is one), then "
        "each key=value override in order (e.g. trainer.steps=100 algorithm.loss.name=gspo). "
        "`rllm train --help-config` lists every key.",
    )
    parser.add_argument(
        "args",
        nargs="*",
        metavar="[CONFIG.yaml] [key=value ...]",
        help="an optional YAML config file, then key=value overrides",
    )
    parser.add_argument(
        "--help-config", action="store_true", help="print every config key (type, default, meaning) and exit"
    )
    parser.set_defaults(func=run_train)
    return parser


def split_config_args(args: list[str]) -> tuple[str | None, list[str]]:
    """Split positional arguments into (YAML file or None, overrides).

    The file is the argument ending in .yaml/.yml that is not itself an override (``key=x.yaml``).

    Raises:
        ConfigError: more than one config file was given.
    """
    from rllm.utils.config import ConfigError  # OmegaConf and PyYAML: not at `rllm --help`

    files = [arg for arg in args if "=" not in arg and arg.lower().endswith(_CONFIG_SUFFIXES)]
    if len(files) > 1:
        raise ConfigError(
            f"more than one config file given ({', '.join(files)}): pass one YAML file and key=value overrides"
        )
    return (files[0] if files else None), [arg for arg in args if arg not in files]


@contextmanager
def _no_hf_progress_bars_in_logs() -> Iterator[None]:
    """transformers' "Loading weights" bars are noise in a log file; keep them for people at a terminal.
    Here rather than in the CLI's logging set-up because only training has transformers loaded."""
    from transformers.utils import logging as hf_logging

    bars_were_on = hf_logging.is_progress_bar_enabled()
    if not sys.stderr.isatty():
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if bars_were_on:
            hf_logging.enable_progress_bar()


@contextmanager
def _sigterm_unwinds() -> Iterator[None]:
    """SIGTERM (a scheduler's cancel, ``kill``) unwinds like Ctrl-C, so the trainer's ``finally`` stops what it
    started in other process groups (vLLM servers, Ray actors) instead of leaving them running. Once it has
    unwound, the process exits at once with status 143: interpreter finalization after a signal is skipped, as
    it can crash in C extensions (measured: a segfault in the garbage collector at exit, after Ray 2.60's driver
    shut down, turned the status into -6 in 10 of 14 runs)."""
    terminated = False

    def unwind(signum: int, frame: object) -> None:
        nonlocal terminated
        terminated = True
        raise SystemExit(128 + signum)

    try:
        previous = signal.signal(signal.SIGTERM, unwind)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    except BaseException:  # SystemExit, or whatever the unwinding turned it into (a cancelled task's error)
        if not terminated:
            raise
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(128 + signal.SIGTERM)
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_train(args: argparse.Namespace) -> int:
    """Handler of ``rllm train``; returns the process exit code."""
    # Imported here: the trainer pulls in torch and transformers, which `rllm --help` should not wait for.
    from rllm.trainer.config import TrainConfig
    from rllm.utils.config import describe_config, load_config

    if args.help_config:
        print(describe_config(TrainConfig), end="")
        return 0

    from rllm.trainer.agent_trainer import AgentTrainer  # torch, as above
    from rllm.trainer.project import find_project_config  # beside the trainer, as above

    try:
        yaml_path, overrides = split_config_args(args.args)
        if yaml_path is None and (project := find_project_config()) is not None:
            logger.info(
                "config: %s (a project's config; pass another YAML file to use that instead)", project
            )
            yaml_path = str(project)
        config = load_config(TrainConfig, yaml_path, overrides)
        # Construction checks what the backend supports, builds the tasks and resolves the model path.
        trainer = AgentTrainer(config)
    except ValueError as err:  # ConfigError, UnsupportedConfigError, ModelNotFoundError, bad task name
        return _error(err, EXIT_USAGE)
    except ModelPullError as err:
        return _error(err, EXIT_FAILURE)

    # torch and numpy, as above
    from rllm.store import StoreError
    from rllm.trainer.agent_trainer import StaleSamplesError
    from rllm.trainer.backends.base import UnsupportedConfigError, WeightSyncError

    logger.info(
        "training %s on task %r for %s (%s); run directory %s",
        config.model.path,
        config.data.train_file or config.data.task,
        _steps(config.trainer.steps),
        "LoRA" if config.lora.enabled else "full fine-tune",
        trainer.run_dir,
    )
    try:
        with _no_hf_progress_bars_in_logs(), _sigterm_unwinds():
            result = trainer.train()
    except UnsupportedConfigError as err:  # e.g. the run directory already has checkpoints
        return _error(err, EXIT_USAGE)
    except StoreError as err:  # the run store cannot be opened (a read-only place, a newer layout)
        return _error(err, EXIT_FAILURE)
    except (WeightSyncError, StaleSamplesError) as err:  # a server could not take the new weights
        return _error(err, EXIT_FAILURE)
    metrics_path = trainer.run_dir / "metrics.jsonl" if "jsonl" in config.trainer.loggers else None
    print(format_summary(result, num_test_tasks=len(trainer.test_tasks), metrics_path=metrics_path))
    return 0


def _error(err: BaseException, code: int) -> int:
    message = " ".join(str(err).split()) or type(err).__name__
    print(f"rllm: error: {message}", file=sys.stderr)
    return code


def _steps(n: int) -> str:
    return f"{n} step" if n == 1 else f"{n} steps"


def _accuracy_text(accuracy: float | None, num_tasks: int, missing: str) -> str:
    if accuracy is None:
        return f"not measured ({missing})"
    return f"{accuracy:6.1%}  ({round(accuracy * num_tasks)} of {num_tasks} tasks)"


def format_summary(result: TrainResult, *, num_test_tasks: int, metrics_path: Path | None) -> str:
    """The block ``rllm train`` prints at the end: held-out greedy accuracy before/after and where
    the run's files are."""
    before, after = result.initial_accuracy, result.final_accuracy
    lines = [
        "",
        f"── rllm train: done ({_steps(result.steps)}) " + "─" * 40,
        f"held-out greedy accuracy on {num_test_tasks} tasks:",
        f"  before training  {_accuracy_text(before, num_test_tasks, 'eval.before=false')}",
        f"  after training   {_accuracy_text(after, num_test_tasks, 'eval.after=false')}",
    ]
    if before is not None and after is not None:
        lines.append(f"  change           {100 * (after - before):+.1f} points")
    lines += [
        f"run directory      {result.run_dir}",
        f"final model        {result.final_model_dir or 'not written'}",
        *(f"  adapter {name}".ljust(19) + str(path) for name, path in result.adapter_models.items()),
        f"metrics            {metrics_path or 'not written (add jsonl to trainer.loggers)'}",
    ]
    return "\n".join(lines)
