"""``rllm init NAME [--template math|tool|multi-agent|gateway-agent]``: a new project that trains at once.

    rllm init my-agent                        # the math template: a single-turn flow and its evaluator
    rllm init my-agent --template tool        # a ReAct agent with a calculator tool
    cd my-agent && rllm train                 # reads ./rllm.yaml: the project's flow on its tasks
    pytest -q                                 # the project's own checks, no model needed

A project is a flow, an evaluator, example tasks (``data/*.jsonl``, to replace), a config (``rllm.yaml``:
``workflow.name: flow``, ``workflow.flow: module:attribute``, ``data.train_file``) and a test. The
templates are package data (``rllm/cli/templates/<name>/``): files ending in ``.tmpl`` lose the suffix and
have ``{{name}}`` replaced by the project's name; the others are copied as they are. docs/init.md.
"""

from __future__ import annotations

import argparse
import re
import sys
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path

from rllm.utils.config import did_you_mean

TEMPLATES = {
    "math": "a single-turn math flow with a number reward",
    "tool": "a ReAct agent with a calculator tool (rllm's ToolAgentWorkflow)",
    "multi-agent": "two solvers and a judge, each role with its own reward",
    "gateway-agent": "a plain openai-client agent wrapped with @rllm.rollout, trained through the gateway",
}
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
_SUFFIX = ".tmpl"
EXIT_USAGE = 2


class InitError(ValueError):
    """The project cannot be created as asked; the message says what to change."""


def add_init_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``rllm init`` on the top-level CLI's ``subparsers``; return the new parser."""
    parser = subparsers.add_parser(
        "init",
        help="create a new project (flow, evaluator, tasks, config, test) that `rllm train` trains",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "name", help="the project directory to create (its last part: letters, digits, - and _)"
    )
    parser.add_argument(
        "--template",
        default="math",
        help="; ".join(f"{name}: {about}" for name, about in TEMPLATES.items()) + " (default: math)",
    )
    parser.set_defaults(func=run_init)
    return parser


def _template_root(template: str) -> Traversable:
    if template not in TEMPLATES:
        raise InitError(
            f"unknown template {template!r}"
            + (did_you_mean(template, TEMPLATES) or f": choose one of {', '.join(TEMPLATES)}")
        )
    return resources.files("rllm.cli").joinpath("templates", template)


def _files(root: Traversable, prefix: Path = Path()) -> list[tuple[Path, Traversable]]:
    out: list[tuple[Path, Traversable]] = []
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        if entry.name == "__pycache__":
            continue
        if entry.is_dir():
            out += _files(entry, prefix / entry.name)
        else:
            out.append((prefix / entry.name, entry))
    return out


def create_project(directory: str | Path, template: str = "math") -> list[Path]:
    """Write template ``template`` into ``directory`` (created; it must not exist or be empty), with the
    directory's name as the project's name. Returns the files written. Blocking: writes to disk."""
    target = Path(directory)
    name = target.name
    if not _NAME.match(name):
        raise InitError(
            f"project name {name!r} must start with a letter and hold only letters, digits, '-' and '_' "
            "(it names the directory, the run and the Python project)"
        )
    root = _template_root(template)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise InitError(f"{target} already exists and is not an empty directory: choose another name")
    written = []
    for relative, source in _files(root):
        out = target / relative
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.name.endswith(_SUFFIX):
            out = out.with_name(out.name.removesuffix(_SUFFIX))
            out.write_text(source.read_text(encoding="utf-8").replace("{{name}}", name), encoding="utf-8")
        else:
            out.write_bytes(source.read_bytes())
        written.append(out)
    return written


def run_init(args: argparse.Namespace) -> int:
    """Handler of ``rllm init``; returns the process exit code."""
    try:
        create_project(args.name, args.template)
    except InitError as err:
        print(f"rllm: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    train = f"cd {args.name} && rllm train"
    print(
        f"created {args.name}/ from the {args.template} template: {TEMPLATES[args.template]}\n"
        f"  {train}   # train it (reads ./rllm.yaml)\n"
        f"  {'pytest -q':<{len(train)}}   # its checks, no model needed (run in {args.name}/)\n"
        f"  replace data/*.jsonl with your tasks; see README.md"
    )
    return 0
