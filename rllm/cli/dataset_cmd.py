"""``rllm dataset``: list, pull, inspect, register and remove datasets.

    rllm dataset list [--family math] [--tsv]       every dataset: built-in, local, and the catalog by family
    rllm dataset pull gsm8k [--force]               download a catalog benchmark and register it locally
    rllm dataset pull gsm8k --file test=test.parquet   ... from a local copy of the hub's files
    rllm dataset inspect gsm8k [--split test] [-n 3]   show a few rows
    rllm dataset register mine data.jsonl [--split train] [--reward math] [--question-key q --answer-key a]
    rllm dataset remove mine
    rllm dataset from-eval results.jsonl -o sft.jsonl --correct-only --best-of 2   curate an eval into SFT data
    rllm dataset from-run runs/my-run -o sft.jsonl --min-reward 1 --steps 5:   ... a training run's episodes

Each subcommand stores its handler as ``args.func``; a handler takes the parsed arguments and returns
the process exit code.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rllm.data.registry import DatasetInfo

_SHOW_CHARS = 1500  # inspect shortens longer strings (LiveCodeBench tests, HotpotQA paragraphs)


def _user_errors() -> tuple[type[BaseException], ...]:
    """What a dataset command reports as one line (a bad name, row, split or file), not as a traceback."""
    # Imported here, like the registry in every handler: it loads the catalog and the built-in generators,
    # which `rllm --help` should not wait for.
    from rllm.data.registry import DatasetNotFoundError, InvalidTaskError

    return (DatasetNotFoundError, InvalidTaskError, ValueError, TypeError, KeyError, FileNotFoundError)


def add_dataset_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``rllm dataset {list,pull,inspect,register,remove}`` on the top-level CLI's ``subparsers``."""
    parser = subparsers.add_parser("dataset", help="list, pull, inspect, register and remove datasets")
    commands = parser.add_subparsers(
        dest="dataset_command",
        metavar="{list,pull,inspect,register,remove,from-eval,from-run}",
        required=True,
    )

    listing = commands.add_parser(
        "list",
        help="list built-in, local and catalog datasets",
        description="Built-in and registered datasets, then the catalog's benchmarks by family, each with "
        "its reward, rows per split and licence as its hub dataset card gives them.",
    )
    listing.add_argument(
        "--family", default=None, help="only the catalog's FAMILY: math, code, qa, reasoning, finance, agent"
    )
    listing.add_argument(
        "--tsv",
        action="store_true",
        help="one tab-separated line per dataset (name, kind, reward, splits, size, licence, family, "
        "description) for scripts",
    )
    listing.set_defaults(func=run_dataset_list)

    pull = commands.add_parser(
        "pull",
        help="download a catalog benchmark from the Hugging Face hub and register it",
        description="Download a benchmark of the catalog (see `rllm dataset list`), convert its rows to the "
        "task schema and register every split locally. Runs once; later loads read the local copy.",
    )
    pull.add_argument("name", help="catalog dataset name")
    pull.add_argument("--force", action="store_true", help="download and convert again")
    pull.add_argument(
        "--file",
        action="append",
        default=[],
        metavar="SPLIT=PATH",
        help="read SPLIT from a local copy of the hub's file (parquet or JSONL, hub columns) instead of "
        "downloading; repeat for several splits",
    )
    pull.set_defaults(func=run_dataset_pull)

    inspect = commands.add_parser("inspect", help="show a dataset's details and a few rows")
    inspect.add_argument("name")
    inspect.add_argument(
        "--split", default=None, help="split to show (default: train if present, else the first)"
    )
    inspect.add_argument("-n", type=int, default=3, help="rows to show (default 3)")
    inspect.set_defaults(func=run_dataset_inspect)

    register = commands.add_parser(
        "register",
        help="register a JSONL, JSON, CSV or parquet file as a dataset split",
        description="Register a file of records as split SPLIT of dataset NAME. The question comes from "
        "--question-key (default: question, problem or prompt), the answer from --answer-key (default: "
        "ground_truth or answer), the id from task_id or id; other columns go into metadata.",
    )
    register.add_argument("name")
    register.add_argument("file")
    register.add_argument("--split", default="train", help="split name (default train)")
    register.add_argument("--reward", default=None, help="the reward that grades it (math, code, f1, ...)")
    register.add_argument("--question-key", default=None, help="column holding the question")
    register.add_argument("--answer-key", default=None, help="column holding the ground truth")
    register.add_argument("--description", default=None, help="one line saying what the dataset is")
    register.set_defaults(func=run_dataset_register)

    remove = commands.add_parser("remove", help="delete a registered dataset and all its splits")
    remove.add_argument("name")
    remove.set_defaults(func=run_dataset_remove)

    from_eval = commands.add_parser(
        "from-eval",
        help="curate an eval's samples into an SFT dataset of chat conversations (messages JSONL)",
        description="Rejection sampling: read the samples of an `rllm eval --output RESULTS` file and the "
        "conversations the gateway recorded beside it (RESULTS' .traces.db), keep those that pass the "
        "filters, and write them as OpenAI/TRL `messages` rows (docs/datasets.md, Curation).",
    )
    from_eval.add_argument("results", help="the results JSONL of `rllm eval --output`")
    _curate_options(from_eval, default_out="<RESULTS>.sft.jsonl")
    from_eval.set_defaults(func=run_dataset_from_eval)

    from_run = commands.add_parser(
        "from-run",
        help="curate a training run's episodes into an SFT dataset of chat conversations (messages JSONL)",
        description="Rejection sampling: read every finished episode of a training run (its directory's "
        "journal.db; a run known only to the run store gives the sample of episodes the store keeps), keep "
        "the conversations that pass the filters, and write them as OpenAI/TRL `messages` rows.",
    )
    from_run.add_argument("run", help="a run directory (runs/NAME), or a run's name or id in the run store")
    from_run.add_argument(
        "--steps",
        default=None,
        metavar="A:B",
        help="only training steps A to B, both included, numbered as logged (1-based); A: or :B leave one "
        "side open",
    )
    from_run.add_argument(
        "--store",
        default=None,
        help="the run store to look RUN up in (default: $RLLM_STORE, else runs/rllm.db)",
    )
    _curate_options(from_run, default_out="<RUN>.sft.jsonl in the current directory")
    from_run.set_defaults(func=run_dataset_from_run)
    return parser


def _curate_options(p: argparse.ArgumentParser, default_out: str) -> None:
    """The filters and output options ``from-eval`` and ``from-run`` share."""
    p.add_argument(
        "-o", "--output", default=None, help=f"the messages JSONL to write (default {default_out})"
    )
    p.add_argument("--min-reward", type=float, default=None, help="keep conversations with reward >= X")
    p.add_argument("--correct-only", action="store_true", help="keep only episodes graded correct")
    p.add_argument(
        "--best-of",
        type=int,
        default=None,
        metavar="K",
        help="per task (and role) keep at most K conversations: highest reward first, then correct, then "
        "the shorter response, then the first read",
    )
    p.add_argument(
        "--min-tokens",
        type=int,
        default=None,
        help="keep responses of at least N sampled tokens (characters where the source has no token counts)",
    )
    p.add_argument(
        "--max-tokens",
        type=int,
        default=None,
        help="keep responses of at most N sampled tokens (characters where the source has no token counts)",
    )
    p.add_argument(
        "--role", default=None, help="keep one role's conversations (multi-role episodes: solver, judge)"
    )
    p.add_argument(
        "--keep-duplicates", action="store_true", help="keep identical conversations (default: dedupe)"
    )
    p.add_argument(
        "--tool-parser",
        default="hermes",
        help="read tool calls written as text in replies with this parser into OpenAI tool_calls "
        "(hermes; none keeps the text)",
    )
    p.add_argument(
        "--register",
        default=None,
        metavar="NAME",
        help="also register the output as local dataset NAME (split train): the first user message is the "
        "question, the kept reply the answer, the conversation in metadata",
    )


def _error(err: BaseException) -> int:
    # str(KeyError) quotes its message; print the message itself.
    message = err.args[0] if isinstance(err, KeyError) and err.args else err
    print(f"error: {message}", file=sys.stderr)
    return 1


def _splits_text(info: DatasetInfo) -> str:
    if all(count is None for count in info.splits.values()):
        return "/".join(info.splits) + " (generated)"
    return " ".join(f"{split}={count}" for split, count in info.splits.items())


def _columns(rows: list[list[str]]) -> list[str]:
    """Rows as lines of left-aligned columns (the last column is not padded)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return ["  ".join([*(cell.ljust(w) for cell, w in zip(row, widths)), row[-1]]).rstrip() for row in rows]


def _list_tsv(infos: list[DatasetInfo], local: set[str], family: str | None) -> None:
    from rllm.data.catalog import CATALOG  # with the registry: not at `rllm --help`

    for info in infos if family is None else []:
        where = info.kind if info.kind == "built-in" else "local"
        about = info.description + (f" [{info.source}]" if info.kind == "local" and info.source else "")
        entry = CATALOG.get(info.name)
        entry_family, licence = (entry.family, entry.license) if entry else ("-", "-")
        print(
            "\t".join(
                [
                    info.name,
                    where,
                    info.reward or "-",
                    _splits_text(info),
                    _splits_text(info),
                    licence,
                    entry_family,
                    about,
                ]
            )
        )
    for entry in CATALOG.values():
        if entry.name not in local and family in (None, entry.family):
            print(
                "\t".join(
                    [
                        entry.name,
                        "catalog (not pulled)",
                        entry.reward,
                        "/".join(entry.splits),
                        entry.size_text,
                        entry.license,
                        entry.family,
                        f"{entry.description} [{entry.source}]",
                    ]
                )
            )


def run_dataset_list(args: argparse.Namespace) -> int:
    """The registered datasets, then the catalog by family: name, reward, rows per split, licence, source
    and description in aligned columns (``--tsv``: one tab-separated line each; ``--family``: one family)."""
    # with the registry: not at `rllm --help`
    from rllm.data.catalog import FAMILIES, catalog_families
    from rllm.data.registry import DatasetRegistry
    from rllm.utils.config import unknown_name

    if args.family is not None and args.family not in FAMILIES:
        return _error(ValueError(unknown_name("family", args.family, FAMILIES)))
    infos = DatasetRegistry().list()
    local = {info.name for info in infos}
    if args.tsv:
        _list_tsv(infos, local, args.family)
        return 0
    if args.family is None:
        rows = [["name", "kind", "reward", "rows", "description"]]
        for info in infos:
            about = info.description + (f" [{info.source}]" if info.kind == "local" and info.source else "")
            rows.append([info.name, info.kind, info.reward or "-", _splits_text(info), about])
        print(f"registered ({len(infos)})")
        print("\n".join("  " + line for line in _columns(rows)))
    for family, entries in catalog_families().items():
        if args.family not in (None, family) or not entries:
            continue
        rows = [["name", "reward", "rows (hub card)", "licence", "pulled", "hub source", "description"]]
        for e in entries:
            pulled = "yes" if e.name in local else "-"
            source = e.hub_path + (f" ({e.config})" if e.config else "")
            rows.append([e.name, e.reward, e.size_text, e.license, pulled, source, e.description])
        print(f"\ncatalog: {family} ({len(entries)})")
        print("\n".join("  " + line for line in _columns(rows)))
    print("\n`rllm dataset pull NAME` downloads a catalog benchmark; docs/datasets.md says more about each.")
    return 0


def run_dataset_pull(args: argparse.Namespace) -> int:
    """Pull catalog dataset ``args.name`` and print its splits and directory."""
    # with the registry: not at `rllm --help`
    from rllm.data.catalog import CATALOG, not_in_catalog
    from rllm.data.hub import DatasetPullError, pull
    from rllm.data.registry import DatasetRegistry, builtin_datasets

    registry = DatasetRegistry()
    if args.name not in CATALOG:
        if args.name in builtin_datasets():
            print(
                f"{args.name} is built-in: it is generated when loaded, there is nothing to pull",
                file=sys.stderr,
            )
            return 0
        return _error(KeyError(not_in_catalog(args.name)))
    files = {}
    for item in args.file:
        split, sep, path = item.partition("=")
        if not sep or not split or not path:
            return _error(ValueError(f"--file takes SPLIT=PATH, got {item!r}"))
        files[split] = path
    try:
        info = pull(args.name, registry=registry, force=args.force, files=files or None)
    except (DatasetPullError, *_user_errors()) as err:
        return _error(err)
    print(f"{info.name}: {_splits_text(info)} -> {info.path}")
    return 0


def run_dataset_inspect(args: argparse.Namespace) -> int:
    """Print the dataset's details and its first ``args.n`` rows of ``args.split``."""
    from rich.console import Console, Group
    from rich.panel import Panel
    from rich.pretty import Pretty
    from rich.text import Text

    from rllm.data.registry import DatasetRegistry  # not at `rllm --help`

    registry = DatasetRegistry()
    try:
        info = registry.info(args.name)
        split = args.split or ("train" if "train" in info.splits else next(iter(info.splits)))
        rows = registry.load(args.name, split, limit=max(args.n, 0))
    except _user_errors() as err:
        return _error(err)
    console = Console()
    console.print(
        f"[bold]{info.name}[/bold] ({info.kind}) reward={info.reward or '-'} splits: {_splits_text(info)}"
    )
    if info.description or info.source:
        console.print(f"{info.description} [dim]{info.source}[/dim]".strip())
    for row in rows:
        question = (
            row["question"] if len(row["question"]) <= _SHOW_CHARS else row["question"][:_SHOW_CHARS] + " ..."
        )
        body = Group(
            Text(question),
            Text("ground_truth", style="bold"),
            Pretty(row["ground_truth"], max_string=_SHOW_CHARS),
            Text(f"data_source: {row['data_source']}", style="bold"),
            Text("metadata", style="bold"),
            Pretty(row["metadata"], max_string=_SHOW_CHARS),
        )
        console.print(Panel(body, title=f"{split}: {row['task_id']}", title_align="left"))
    return 0


def run_dataset_register(args: argparse.Namespace) -> int:
    """Register ``args.file`` as ``args.name``/``args.split``."""
    from rllm.data.registry import DatasetRegistry  # not at `rllm --help`

    try:
        info = DatasetRegistry().register_file(
            args.name,
            args.file,
            args.split,
            question_key=args.question_key,
            answer_key=args.answer_key,
            reward=args.reward,
            description=args.description,
        )
    except _user_errors() as err:
        return _error(err)
    print(f"{info.name}: {_splits_text(info)} -> {info.path}")
    return 0


def run_dataset_remove(args: argparse.Namespace) -> int:
    """Delete registered dataset ``args.name``."""
    from rllm.data.registry import DatasetRegistry  # not at `rllm --help`

    try:
        DatasetRegistry().remove(args.name)
    except _user_errors() as err:
        return _error(err)
    print(f"removed {args.name}")
    return 0


def _curate_and_write(args: argparse.Namespace, read: Any, default_out: Path) -> int:
    """Read conversations with ``read()``, filter them as ``args`` says, write and summarise them."""
    # rllm.eval's package loads the eval runner and the gateway: not at `rllm --help`
    from rllm.eval.curate import CurateFilters, CurationError, curate, parse_steps, write_messages_jsonl

    try:
        filters = CurateFilters(
            min_reward=args.min_reward,
            correct_only=args.correct_only,
            best_of=args.best_of,
            min_tokens=args.min_tokens,
            max_tokens=args.max_tokens,
            role=args.role,
            steps=parse_steps(args.steps) if getattr(args, "steps", None) else None,
            dedupe=not args.keep_duplicates,
        )
        conversations, note = read()
        result = curate(conversations, filters, note=note)
        out = write_messages_jsonl(result.kept, args.output or default_out)
        registered = _register_curated(args.register, out) if args.register else None
    except (CurationError, *_user_errors()) as err:
        return _error(err)
    print(result.summary())
    print(f"wrote {out}" + (f"; registered as dataset {registered}" if registered else ""))
    return 0


def _register_curated(name: str, path: Path) -> str:
    """Register the messages JSONL at ``path`` as dataset ``name`` (see ``--register``)."""
    from rllm.data.registry import DatasetRegistry  # not at `rllm --help`

    rows = []
    for i, line in enumerate(path.read_text().splitlines()):
        row = json.loads(line)
        messages = row["messages"]
        question = next((m["content"] for m in messages if m["role"] == "user"), "")
        rows.append(
            {
                "task_id": f"{row['task_id']}#{i}",
                "question": question,
                "ground_truth": messages[-1].get("content") or "",
                "data_source": name,
                "metadata": {k: v for k, v in row.items() if k != "task_id"} | {"task": row["task_id"]},
            }
        )
    info = DatasetRegistry().register(name, rows, "train", description=f"curated from {path.name}")
    return info.name


def run_dataset_from_eval(args: argparse.Namespace) -> int:
    """Curate the eval results ``args.results`` into a messages JSONL."""
    from rllm.eval.curate_sources import conversations_from_eval  # the gateway's store: not at `rllm --help`

    results = Path(args.results)
    return _curate_and_write(
        args,
        lambda: conversations_from_eval(results, tool_parser=args.tool_parser),
        results.with_suffix(".sft.jsonl"),
    )


def run_dataset_from_run(args: argparse.Namespace) -> int:
    """Curate the training run ``args.run`` into a messages JSONL."""
    from rllm.eval.curate_sources import conversations_from_run  # the run store: not at `rllm --help`

    return _curate_and_write(
        args,
        lambda: conversations_from_run(args.run, store=args.store, tool_parser=args.tool_parser),
        Path(f"{Path(args.run).name}.sft.jsonl"),
    )
