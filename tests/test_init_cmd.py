"""`rllm init NAME --template T`: each template makes a project whose own tests pass, whose code is ruff
clean and whose config `rllm train` accepts; bad names, unknown templates and non-empty directories are
refused in one line with exit 2. The real training run in a generated project: tests/slow/test_init_train.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

from rllm.cli.init_cmd import TEMPLATES, create_project
from rllm.cli.main import main
from rllm.data.builtin import PRODUCT_QUESTIONS, _pair_key

REPO = Path(__file__).resolve().parents[1]
RUFF = Path(sys.executable).with_name("ruff")

# Runs each project's own `pytest -q` in one interpreter (torch is imported once, not per project); the
# project's modules (agent, evaluator, flow, test_project) are forgotten between projects, since every
# template uses the same names.
_RUN_PROJECT_TESTS = """
import os, sys, pytest
codes = {}
for directory in sys.argv[1:]:
    os.chdir(directory)
    for name in [m for m in sys.modules if m.split(".")[0] in ("agent", "evaluator", "flow", "test_project")]:
        del sys.modules[name]
    codes[directory] = pytest.main(["-q", "-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-W", "error::pytest.PytestUnraisableExceptionWarning"])
print("CODES", codes)
sys.exit(max(codes.values()))
"""


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("rllm: error: ")
    return lines[0]


@pytest.fixture(scope="module")
def projects(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("projects")
    made = {}
    for template in TEMPLATES:
        directory = root / f"my_{template.replace('-', '_')}"
        create_project(directory, template)
        made[template] = directory
    return made


@pytest.mark.parametrize("template", list(TEMPLATES))
def test_template_makes_a_complete_project(projects: dict[str, Path], template: str) -> None:
    directory = projects[template]
    files = {str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file()}
    assert {"README.md", "rllm.yaml", "pyproject.toml", "tests/test_project.py", "data/train.jsonl"} <= files
    assert "agent.py" in files
    assert not [f for f in files if f.endswith(".tmpl")]
    text = "".join(
        p.read_text() for p in directory.rglob("*") if p.suffix in (".md", ".yaml", ".toml", ".py")
    )
    assert "{{" not in text
    assert f"name: {directory.name}" in (directory / "rllm.yaml").read_text()  # the run is named after it
    assert "REPLACE ME" in (directory / "rllm.yaml").read_text()


def test_generated_code_is_ruff_clean(projects: dict[str, Path]) -> None:
    for directory in projects.values():
        for command in (["check", "--isolated", "."], ["format", "--isolated", "--check", "."]):
            result = subprocess.run(
                [str(RUFF), *command], cwd=directory, capture_output=True, text=True, check=False
            )
            assert result.returncode == 0, f"{directory.name}: {result.stdout}{result.stderr}"


def test_each_projects_own_tests_pass(projects: dict[str, Path]) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-c", _RUN_PROJECT_TESTS, *map(str, projects.values())],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert result.stdout.count(" passed") == len(projects), result.stdout


# The project's own split rule (rllm/data/builtin.py, ``Problem.key``): a problem is its task and its
# operands, not their order or its wording, so "Which number is larger, 12 or 34?" and "..., 34 or 12?"
# are one problem, and a problem sits on one side of the split only.
_QUESTION_FORMS = [
    ("larger", re.compile(r"Which number is larger, (\d+) or (\d+)\?")),
    ("smaller", re.compile(r"Which number is smaller, (\d+) or (\d+)\?")),
] + [
    ("multiply", re.compile(re.escape(q).replace(r"\{a\}", r"(\d+)").replace(r"\{b\}", r"(\d+)")))
    for q in PRODUCT_QUESTIONS
]


def _problem(question: str) -> tuple[str, str]:
    """The task and problem key of a template question, as rllm.data.builtin keys its own problems."""
    for task, form in _QUESTION_FORMS:
        if match := form.search(question):
            return task, _pair_key(int(match[1]), int(match[2]))
    raise AssertionError(f"no known question form matches {question!r}: add its form to _QUESTION_FORMS")


def _trained_test_questions(train: list[str], test: list[str]) -> list[str]:
    """The test questions whose problem (in any operand order or wording) is also in ``train``."""
    trained = {_problem(q) for q in train}
    return [q for q in test if _problem(q) in trained]


def _template_questions(template: str, split: str) -> list[str]:
    data = resources.files("rllm.cli").joinpath("templates", template, "data", f"{split}.jsonl")
    return [json.loads(line)["question"] for line in data.read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("template", list(TEMPLATES))
def test_no_template_test_question_is_in_its_train_split(template: str) -> None:
    # multi-agent and gateway-agent once had 3 test questions whose reversed pair was in train.
    train, test = _template_questions(template, "train"), _template_questions(template, "test")
    assert train and test
    assert _trained_test_questions(train, test) == []


def test_the_split_check_sees_a_reversed_pair_and_another_wording() -> None:
    train = ["Which number is larger, 12 or 34?", "Multiply 56 by 78."]
    test = [
        "Which number is larger, 34 or 12?",  # the same problem reversed
        "Which number is smaller, 12 or 34?",  # another task: a different problem
        "What is 78 * 56?",  # the same product, another wording and order
        "Which number is larger, 12 or 35?",
    ]
    assert _trained_test_questions(train, test) == [test[0], test[2]]


def test_init_prints_the_next_steps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    assert main(["init", str(tmp_path / "empty"), "--template", "tool"]) == 0  # an empty directory is fine
    out = capsys.readouterr().out
    assert "cd " in out and "rllm train" in out and "data/*.jsonl" in out
    assert (tmp_path / "empty" / "agent.py").is_file()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--template", "mult-agent"], "unknown template 'mult-agent' — did you mean 'multi-agent'?"),
        (
            ["--template", "zzz"],
            "unknown template 'zzz': choose one of math, tool, multi-agent, gateway-agent",
        ),
    ],
)
def test_unknown_template_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main(["init", str(tmp_path / "p"), *args]) == 2
    assert _one_line_error(capsys) == f"rllm: error: {message}"
    assert not (tmp_path / "p").exists()


@pytest.mark.parametrize("name", ["9lives", "my project", "bad.name", "-x"])
def test_a_name_that_is_not_a_project_name_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    assert main(["init", str(tmp_path / name)]) == 2
    assert "must start with a letter and hold only letters, digits" in _one_line_error(capsys)
    assert not (tmp_path / name).exists()


def test_an_existing_directory_with_files_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    assert main(["init", str(tmp_path / "taken")]) == 2
    assert "already exists and is not an empty directory" in _one_line_error(capsys)
    assert sorted(p.name for p in (tmp_path / "taken").iterdir()) == ["notes.txt"]


def test_templates_ship_as_package_data() -> None:
    pyproject = (REPO / "pyproject.toml").read_text()
    assert '"rllm.cli" = ["templates/**/*"]' in pyproject
