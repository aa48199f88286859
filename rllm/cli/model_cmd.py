"""``rllm model``: fetch and list the built-in models.

    rllm model pull smollm2-135m [--force]   convert once into the cache, print the directory
    rllm model list                          built-in names, whether each is cached, what its weights are

Each subcommand stores its handler as ``args.func``; a handler takes the parsed arguments and returns
the process exit code.
"""

from __future__ import annotations

import argparse
import sys

from rllm.models import BUILTIN_MODELS, ModelNotFoundError, ModelPullError, is_pulled, model_dir, pull_model


def add_model_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``rllm model {pull,list}`` on the top-level CLI's ``subparsers``; return the new parser."""
    parser = subparsers.add_parser("model", help="fetch and list the built-in models")
    commands = parser.add_subparsers(dest="model_command", metavar="{pull,list}", required=True)

    pull = commands.add_parser(
        "pull",
        help="convert a built-in model into the cache (once) and print its directory",
        description="Convert a built-in model into rllm's cache and print the model directory. "
        "Runs once; later calls (and training runs naming the model) reuse the cache.",
    )
    pull.add_argument("name", choices=sorted(BUILTIN_MODELS), help="built-in model name")
    pull.add_argument("--force", action="store_true", help="convert again, replacing the cached copy")
    pull.set_defaults(func=run_model_pull)

    listing = commands.add_parser(
        "list", help="list the built-in models, whether each is cached, and what their weights are"
    )
    listing.set_defaults(func=run_model_list)
    return parser


def run_model_pull(args: argparse.Namespace) -> int:
    """Pull ``args.name`` (reconverting with ``args.force``) and print the model directory."""
    if args.force or not is_pulled(args.name):
        print(
            f"Pulling {args.name} into {model_dir(args.name)} (first time: about 30 s on CPU)...",
            file=sys.stderr,
        )
    try:
        path = pull_model(args.name, force=args.force)
    except (ModelNotFoundError, ModelPullError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(path)
    return 0


def run_model_list(args: argparse.Namespace) -> int:
    """Print one tab-separated line per built-in model: name, cached or not, what its weights are (e.g.
    a 4-bit GGUF dequantized to float32), and its directory or description."""
    for name in sorted(BUILTIN_MODELS):
        model = BUILTIN_MODELS[name]
        if is_pulled(name):
            print(f"{name}\tcached\t{model.weights}\t{model_dir(name)}")
        else:
            print(f"{name}\tnot pulled\t{model.weights}\t{model.description} (rllm model pull {name})")
    return 0
