"""Every config key the code and docs quote exists, and so does every ``rllm`` command-line flag they quote.

What is scanned:

- the string literals (docstrings, messages, override lists) and comments of every ``.py`` file under
  ``rllm/``, ``examples/``, ``scripts/`` and ``benchmarks/`` (an f-string's ``{expressions}`` are code, not
  text, and are left out);
- every line of ``README.md``, ``docs/*.md``, the ``.md`` files under ``examples/``, ``scripts/`` and
  ``benchmarks/``, and the shell scripts under ``scripts/`` (prose, backtick spans, ``rllm train ...``
  command lines and fenced blocks alike);
- every key path of the YAML configs under ``examples/`` (each one is a ``rllm train`` config).

A quoted config key is a dotted name that starts with one of ``TrainConfig``'s sections (``model``,
``lora``, ``optim``, ``backend``, ``inference``, ``rollout``, ``algorithm``, ``workflow``, ``data``, ``eval``,
``trainer``) and is not part of a longer dotted name (``rllm.trainer.config`` is a module path, ``cfg.data.task``
an attribute) nor a call (``trainer.train()``), e.g. ``optim.lr=1e-5``, ``algorithm.loss.name`` or
``backend.distributed.*``. It must be a key ``TrainConfig`` accepts (``is_config_key``: the pydantic models
walked, any member of a union of sections, any sub-key of a mapping-valued key), unless it names a file
(``data.jsonl``) or an attribute of the object its section is named after (``model.generate``,
``backend.forward_backward``): those are code, not config.

A quoted flag is a ``--flag`` on the same line after ``rllm COMMAND``; it must be an option of that command.
"""

from __future__ import annotations

import argparse
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from transformers import GenerationMixin, PreTrainedModel

from rllm.cli.main import build_parser, main
from rllm.trainer.agent_trainer import AgentTrainer
from rllm.trainer.backends.base import TrainingBackend
from rllm.trainer.config import TrainConfig
from rllm.trainer.sft_config import SFTConfig
from rllm.utils.config import is_config_key

REPO = Path(__file__).resolve().parents[1]
CODE_DIRS = ("rllm", "examples", "scripts", "benchmarks")

# `rllm sft`'s config shares most sections with TrainConfig; a quoted key may be a key of either.
CONFIGS = (TrainConfig, SFTConfig)
SECTIONS = tuple(dict.fromkeys(name for cfg in CONFIGS for name in cfg.model_fields))
# Possessive: a dotted name is taken whole, so a longer name or a call is skipped whole, never a prefix of it.
KEY = re.compile(r"(?<![\w.$/{\\-])(?:" + "|".join(SECTIONS) + r")(?:\.(?:[A-Za-z_]\w*|\*))++(?![\w(])")
FILE_NAME = re.compile(r"\.(?:jsonl?|ya?ml|parquet|py|md|txt|csv|db|png|safetensors|bin|log|html|js|sh)$")
# Objects named like a section, whose attributes the docs mention as code (``model.generate``).
SECTION_OBJECTS: dict[str, tuple[type, ...]] = {
    "model": (PreTrainedModel, GenerationMixin),
    "backend": (TrainingBackend,),
    "trainer": (AgentTrainer,),
}
# Keys quoted on purpose although they do not exist: the README shows how a misspelt key is refused.
DELIBERATE = {("README.md", "trainer.stepz")}

COMMAND = re.compile(r"\brllm ([a-z][\w-]*)((?: +[^\s`|;&#]+)*)")
FLAG = re.compile(r"(?<!\S)--[a-z][\w-]*")


def _code_files() -> list[Path]:
    return sorted(p for d in CODE_DIRS for p in (REPO / d).rglob("*.py"))


def _text_files() -> list[Path]:
    found = [REPO / "README.md", *(REPO / "docs").glob("*.md"), *(REPO / "scripts").glob("*.sh")]
    found += [p for d in CODE_DIRS for p in (REPO / d).rglob("*.md")]
    return sorted(set(found))


def _without_fstring_expressions(token: str) -> str:
    prefix = re.match(r"[A-Za-z]*", token).group(0).lower()  # type: ignore[union-attr]
    if "f" not in prefix:
        return token
    return re.sub(r"\{[^{}]*\}", "", token.replace("{{", "").replace("}}", ""))


def _texts(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of what a user reads in ``path``: a Python file's strings and comments, or every
    line of a document or script."""
    if path.suffix == ".py":
        for tok in tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline):
            if tok.type == tokenize.STRING:
                yield tok.start[0], _without_fstring_expressions(tok.string)
            elif tok.type == tokenize.COMMENT:
                yield tok.start[0], tok.string
    else:
        yield from enumerate(path.read_text(encoding="utf-8").splitlines(), 1)


def _is_code(key: str) -> bool:
    section, attr = key.split(".")[:2]
    owners = SECTION_OBJECTS.get(section, ())
    declared = {
        name for owner in owners for cls in owner.__mro__ for name in getattr(cls, "__annotations__", {})
    }
    return bool(FILE_NAME.search(key)) or any(hasattr(owner, attr) for owner in owners) or attr in declared


def _unknown_keys_in(path: Path) -> list[str]:
    where = path.relative_to(REPO).as_posix()
    return [
        f"{where}:{line}: {key}"
        for line, text in _texts(path)
        for key in KEY.findall(text)
        if not any(is_config_key(cfg, key) for cfg in CONFIGS)
        and not _is_code(key)
        and (where, key) not in DELIBERATE
    ]


def _yaml_keys(node: Any, prefix: str = "") -> Iterator[str]:
    if isinstance(node, dict):
        for name, value in node.items():
            yield prefix + str(name)
            yield from _yaml_keys(value, f"{prefix}{name}.")


def test_every_quoted_config_key_exists() -> None:
    files = _code_files() + _text_files()
    assert len(files) > 100 and REPO / "README.md" in files  # the scan reaches what it says it scans
    unknown = [problem for path in files for problem in _unknown_keys_in(path)]
    assert not unknown, "quoted config keys that TrainConfig does not have:\n" + "\n".join(unknown)


def test_the_yaml_configs_under_examples_use_only_existing_keys() -> None:
    configs = sorted([*(REPO / "examples").rglob("*.yaml"), *(REPO / "examples").rglob("*.yml")])
    assert configs
    for path in configs:
        keys = list(_yaml_keys(yaml.safe_load(path.read_text(encoding="utf-8"))))
        assert keys, path
        unknown = [key for key in keys if not is_config_key(TrainConfig, key)]
        assert not unknown, f"{path.relative_to(REPO)}: {unknown}"


def _options(parser: argparse.ArgumentParser) -> set[str]:
    options = {o for action in parser._actions for o in action.option_strings}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):  # `rllm dataset pull --x`: any subcommand's
            options |= {o for sub in action.choices.values() for o in _options(sub)}
    return options


def test_every_quoted_command_line_flag_exists() -> None:
    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    top = {o for a in parser._actions for o in a.option_strings}
    checked, unknown = 0, []
    for path in _code_files() + _text_files():
        for line, text in _texts(path):
            for match in COMMAND.finditer(text):
                command = commands.choices.get(match.group(1))
                if command is None:  # `rllm` followed by prose ("rllm train's loop"), not a command
                    continue
                for flag in FLAG.findall(match.group(2)):
                    checked += 1
                    if flag not in _options(command) | top:
                        unknown.append(f"{path.relative_to(REPO)}:{line}: rllm {match.group(1)} {flag}")
    assert checked > 20  # the scan finds the command lines it is meant to check
    assert not unknown, "quoted flags the command does not have:\n" + "\n".join(unknown)


def test_the_readme_shows_the_refusal_rllm_prints(capsys: pytest.CaptureFixture[str]) -> None:
    """The README's example of a misspelt key (the one DELIBERATE allows) shows the line rllm prints."""
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    at = lines.index("$ rllm train trainer.stepz=3")
    assert main(["train", "trainer.stepz=3"]) == 2
    assert capsys.readouterr().err.strip() == lines[at + 1]


@pytest.mark.parametrize(
    ("key", "exists"),
    [
        ("optim.lr", True),
        ("trainer.lr", False),
        ("algorithm.loss.name", True),
        ("algorithm.advantage.solver", True),  # a role of the mapping form
        ("backend.distributed.*", True),
        ("backend.device.*", False),  # not a section
        ("rollout.drop_failed", False),
        ("algorithm.filters.drop_failed", True),
    ],
)
def test_is_config_key(key: str, exists: bool) -> None:
    assert is_config_key(TrainConfig, key) is exists


def test_the_scan_finds_keys_in_prose_commands_and_code_strings() -> None:
    """What KEY matches and what it leaves alone (module paths, attributes, calls, interpolations)."""
    text = (
        "set `optim.lr=1e-5` or trainer.steps. rllm train lora.rank=8 backend.distributed.* "
        "rllm.trainer.config cfg.data.task trainer.train() ${optim.lr} docs/eval.md"
    )
    assert KEY.findall(text) == ["optim.lr", "trainer.steps", "lora.rank", "backend.distributed.*"]
    assert _without_fstring_expressions('f"{trainer.model} is data.task"') == 'f" is data.task"'
