"""``rllm sft``: supervised fine-tuning on a file of conversations, over the same backends as ``rllm train``.

    rllm sft data.train_file=chats.jsonl                 LoRA SFT of the built-in model on the local backend
    rllm sft my.yaml trainer.steps=200 lora.enabled=false
    rllm sft --help-config                               every key with its type, default and meaning

A config or data file that cannot be used (unknown key, unknown format, missing file, an example without an
assistant turn, a backend that cannot run the cross_entropy loss) is reported at start-up as one line on
stderr (``rllm: error: ...``) with exit code 2. See docs/sft.md.
"""

from __future__ import annotations

import argparse
import logging
from typing import TYPE_CHECKING

from rllm.cli.train_cmd import (
    EXIT_FAILURE,
    EXIT_USAGE,
    _error,
    _no_hf_progress_bars_in_logs,
    _sigterm_unwinds,
    split_config_args,
)
from rllm.models import ModelPullError

if TYPE_CHECKING:
    from rllm.trainer.sft import SFTResult

logger = logging.getLogger(__name__)


def add_sft_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``rllm sft`` on the top-level CLI's ``subparsers``; return the new parser."""
    parser = subparsers.add_parser(
        "sft",
        help="supervised fine-tuning on a file of conversations (loss on the assistant turns)",
        description="Supervised fine-tuning. The configuration is the defaults, then CONFIG.yaml if given, "
        "then each key=value override in order (e.g. data.train_file=chats.jsonl sft.batch_size=16). "
        "`rllm sft --help-config` lists every key; docs/sft.md describes the data formats.",
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
    parser.set_defaults(func=run_sft)
    return parser


def run_sft(args: argparse.Namespace) -> int:
    """Handler of ``rllm sft``; returns the process exit code."""
    # Imported here: the trainer pulls in torch and transformers, which `rllm --help` should not wait for.
    from rllm.trainer.sft_config import SFTConfig
    from rllm.utils.config import describe_config, load_config

    if args.help_config:
        print(describe_config(SFTConfig), end="")
        return 0

    from rllm.trainer.sft import SFTTrainer  # torch, as above

    try:
        yaml_path, overrides = split_config_args(args.args)
        config = load_config(SFTConfig, yaml_path, overrides)
        # Construction checks the backend, reads and renders the data and resolves the model path.
        trainer = SFTTrainer(config)
    except (ValueError, FileNotFoundError) as err:  # ConfigError, SFTDataError, UnsupportedConfigError
        return _error(err, EXIT_USAGE)
    except ModelPullError as err:
        return _error(err, EXIT_FAILURE)

    # torch, as above
    from rllm.store import StoreError
    from rllm.trainer.backends.base import UnsupportedConfigError

    logger.info(
        "fine-tuning %s on %s for %d steps (%s); run directory %s",
        config.model.path,
        config.data.train_file,
        trainer.steps,
        "LoRA" if config.lora.enabled else "full fine-tune",
        trainer.run_dir,
    )
    try:
        # SIGTERM unwinds like Ctrl-C, so a distributed run stops its Ray ranks (see rllm train).
        with _no_hf_progress_bars_in_logs(), _sigterm_unwinds():
            result = trainer.train()
    except UnsupportedConfigError as err:  # e.g. the run directory already has checkpoints
        return _error(err, EXIT_USAGE)
    except StoreError as err:
        return _error(err, EXIT_FAILURE)
    print(format_summary(result))
    return 0


def _loss(value: float | None) -> str:
    return "not measured" if value is None else f"{value:.4f}"


def format_summary(result: SFTResult) -> str:
    """The block ``rllm sft`` prints at the end: the losses and where the run's files are."""
    return "\n".join(
        [
            "",
            f"── rllm sft: done ({result.steps} steps) " + "─" * 40,
            f"train loss (last step)   {_loss(result.final_train_loss)}",
            f"held-out loss before     {_loss(result.initial_eval_loss)}",
            f"held-out loss after      {_loss(result.final_eval_loss)}",
            f"run directory            {result.run_dir}",
            f"final model              {result.final_model_dir or 'not written'}",
        ]
    )
