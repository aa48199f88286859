"""The sandbox hides the answers: model-written code cannot read the project, its datasets, the run and
trace stores, HOME or other processes' environments, nor find expected outputs by walking the filesystem.

Each test plants what it looks for (a token in a dataset file, a store, the repository, HOME) or names a
real file of the project, then runs a program that tries its hardest to read it, and asserts it could not.
Each runs twice: with the standard library only, and with numpy allowed (``packages``), whose binds into the
sandbox lie inside the venv, inside the repository, and must open no way to the rest of either.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import rllm
from rllm.data.code_problems import code_problem_tasks
from rllm.data.registry import DatasetRegistry
from rllm.rewards.code import make_code_reward
from rllm.sandbox import run_python

pytestmark = pytest.mark.usefixtures("bubblewrap")

REPO = Path(rllm.__file__).resolve().parents[1]
CODE_PROBLEMS = REPO / "rllm" / "data" / "code_problems.py"


@functools.cache
def _reward(
    packages: tuple[str, ...],
):  # built on first use: without bubblewrap it refuses, the fixture skips
    return make_code_reward(timeout_s=10.0, memory_mb=256, max_parallel=2, packages=packages)


@pytest.fixture(params=[(), ("numpy",)], ids=["stdlib", "numpy-allowed"])
def packages(request: pytest.FixtureRequest) -> tuple[str, ...]:
    """The packages every escape's sandbox allows: none, then numpy (installed in the project's venv)."""
    return request.param


def _try_read(paths: list[str]) -> str:
    """A program printing, per path, ``read N`` (with the bytes) or ``refused <error>``."""
    return (
        "import os\n"
        f"for path in {paths!r}:\n"
        "    try:\n"
        "        if os.path.isdir(path):\n"
        "            print('read', path, os.listdir(path))\n"
        "        else:\n"
        "            print('read', path, open(path, 'rb').read()[:200000])\n"
        "    except OSError as e:\n"
        "        print('refused', path, type(e).__name__)\n"
    )


@pytest.fixture
def planted() -> Iterator[tuple[str, Path]]:
    """A secret token written where a careless sandbox would expose it: a registered dataset's parquet and a
    run store (SQLite), both inside the repository (not under /tmp or HOME), and a file in HOME."""
    token = f"ANSWER-{uuid.uuid4().hex}"
    where = REPO / f".escape-test-{uuid.uuid4().hex[:8]}"
    home_file = Path.home() / f".escape-test-{uuid.uuid4().hex[:8]}"
    try:
        DatasetRegistry(where / "datasets").register(
            "leaky",
            [{"task_id": "t0", "question": "q", "ground_truth": token}],
            "train",
            reward="exact_match",
        )
        with sqlite3.connect(where / "rllm.db") as db:
            db.execute("CREATE TABLE episodes (answer TEXT)")
            db.execute("INSERT INTO episodes VALUES (?)", (token,))
        home_file.write_text(token)
        yield token, where
    finally:
        shutil.rmtree(where, ignore_errors=True)
        home_file.unlink(missing_ok=True)


def test_the_code_problems_module_and_its_tests_are_unreadable(packages: tuple[str, ...]) -> None:
    targets = [
        str(CODE_PROBLEMS),
        str(REPO / "tests" / "data" / "test_code_problems.py"),
        str(REPO / "rllm" / "rewards" / "code.py"),
        str(REPO / "pyproject.toml"),
    ]
    assert all(os.path.exists(p) for p in targets)  # they are there on the host
    result = run_python(_try_read(targets), packages=packages)
    assert result.ok, result.stderr
    assert [line.split()[0] for line in result.stdout.splitlines()] == ["refused"] * len(targets), (
        result.stdout
    )


def test_importing_the_project_from_its_path_fails(packages: tuple[str, ...]) -> None:
    code = (
        "import sys\n"
        f"sys.path[:0] = [{str(REPO)!r}, {str(REPO / '.venv' / 'lib')!r}]\n"
        "try:\n    import rllm.data.code_problems as p\n    print('imported', len(p.PROBLEMS))\n"
        "except ImportError as e:\n    print('no rllm', type(e).__name__)\n"
    )
    result = run_python(code, packages=packages)
    assert result.stdout.startswith("no rllm"), result.stdout + result.stderr


def _on_the_way_to(directory: str, inside: list[str]) -> set[str]:
    """The names in ``directory`` that lead down to one of ``inside`` (the sandbox's own paths)."""
    prefix = directory.rstrip("/") + "/"
    return {p[len(prefix) :].split("/")[0] for p in inside if p.startswith(prefix)}


def test_the_repository_the_venv_and_home_cannot_be_listed(packages: tuple[str, ...]) -> None:
    home = str(Path.home())
    targets = [
        str(REPO),
        str(REPO.parent),
        str(REPO / ".venv"),
        os.path.realpath(os.sys.prefix),
        home,
        str(Path(home) / ".cache"),
        str(REPO / "runs"),
    ]
    # The program also says where it runs (its work dir) and from which interpreter: a directory above
    # those exists inside, holding only the way down to them (the repository may sit in /tmp, beside the
    # sandbox's own work dir, as CI's clone can).
    code = "import os, sys\nprint('own', os.getcwd(), sys.base_prefix)\n" + _try_read(targets)
    result = run_python(code, packages=packages)
    first, *lines = result.stdout.splitlines()
    assert first.startswith("own "), result.stdout + result.stderr
    own_paths = first.split()[1:]
    assert lines, result.stdout + result.stderr
    for line in lines:
        verdict, path, *rest = line.split(maxsplit=2)
        if verdict == "read" and path in (home, str(REPO.parent)):
            listed = set(json.loads(rest[0].replace("'", '"')))
            assert listed <= _on_the_way_to(path, own_paths), line
            continue
        assert verdict == "refused", line


def test_a_registered_dataset_and_the_run_store_are_unreadable(
    planted: tuple[str, Path], packages: tuple[str, ...]
) -> None:
    token, where = planted
    files = [str(p) for p in where.rglob("*") if p.is_file()]
    assert any(f.endswith(".parquet") for f in files) and any(f.endswith("rllm.db") for f in files)
    result = run_python(_try_read([str(where), *files]), packages=packages)
    assert token not in result.stdout and token not in result.stderr
    assert all(line.startswith("refused") for line in result.stdout.splitlines()), result.stdout


def test_the_default_caches_and_stores_are_absent(packages: tuple[str, ...]) -> None:
    from rllm.models import cache_dir
    from rllm.store import default_store_path

    targets = [
        str(cache_dir()),
        str(DatasetRegistry().root),
        str(default_store_path().parent),
        str(Path.home() / ".cache" / "huggingface"),
        os.environ.get("RLLM_STORE", "/nonexistent"),
    ]
    result = run_python(_try_read(targets), packages=packages)
    assert all(line.startswith("refused") for line in result.stdout.splitlines()), result.stdout


def test_proc_1_environ_and_every_visible_environ_hold_no_secret(
    monkeypatch: pytest.MonkeyPatch, packages: tuple[str, ...]
) -> None:
    secret = f"sk-{uuid.uuid4().hex}"
    monkeypatch.setenv("RLLM_FAKE_TOKEN", secret)
    code = (
        "import os\n"
        "print(os.environ)\n"
        "for pid in ['1', 'self', *[p for p in os.listdir('/proc') if p.isdigit()]]:\n"
        "    for name in ('environ', 'cmdline'):\n"
        "        try:\n            print(pid, name, open(f'/proc/{pid}/{name}', 'rb').read())\n"
        "        except OSError as e:\n            print(pid, name, type(e).__name__)\n"
    )
    result = run_python(code, packages=packages)
    assert result.ok, result.stderr
    assert secret not in result.stdout and "RLLM_FAKE_TOKEN" not in result.stdout
    assert "1 environ" in result.stdout


def test_walking_the_filesystem_finds_no_expected_output(
    planted: tuple[str, Path], packages: tuple[str, ...]
) -> None:
    token, _ = planted
    prefix = os.path.realpath(os.sys.base_prefix)
    # Every name everywhere; the contents of every file outside the system and interpreter trees (those
    # are the host's own, read-only, and the same on every machine).
    code = (
        "import os, sys\n"
        "hits, names, read = [], 0, 0\n"
        "mark = 'ANS' + 'WER-'\n"  # not the literal: main.py itself is read too
        "for top, dirs, files in os.walk('/'):\n"
        "    if top in ('/proc', '/dev', '/sys'):\n"
        "        dirs[:] = []\n"
        "        continue\n"
        "    for name in dirs + files:\n"
        "        names += 1\n"
        "        if mark in name or 'escape-' + 'test' in name:\n"
        "            hits.append(os.path.join(top, name))\n"
        f"    if top.startswith('/usr') or top.startswith({prefix!r}):\n"
        "        continue\n"
        "    for name in files:\n"
        "        try:\n"
        "            data = open(os.path.join(top, name), 'rb').read(1 << 20)\n"
        "            read += 1\n"
        "        except OSError:\n"
        "            continue\n"
        "        if mark.encode() in data:\n"
        "            hits.append(os.path.join(top, name))\n"
        "print(names, read, hits)\n"
    )
    result = run_python(code, timeout_s=60, packages=packages)
    assert result.ok, result.stderr
    names, read, hits = result.stdout.split(maxsplit=2)
    assert int(names) > 1000 and int(read) >= 1  # it did walk the system tree and read files
    assert hits.strip() == "[]", hits
    assert token not in result.stdout


def test_a_code_problem_cannot_be_solved_by_reading_its_answers(packages: tuple[str, ...]) -> None:
    """The reward hack the allow-list closes: read the built-in problem's tests from the project's source
    (by path, by import, from a dataset row) and return the expected value."""
    task = code_problem_tasks("test")[0]
    entry = task["ground_truth"]["entry_point"]
    program = (
        "import ast, sys\n"
        f"sys.path.insert(0, {str(REPO)!r})\n"
        "def sources():\n"
        f"    yield {str(CODE_PROBLEMS)!r}\n"
        "    try:\n"
        "        import rllm.data.code_problems as problems\n"
        "        yield problems.__file__\n"
        "    except ImportError:\n"
        "        pass\n"
        f"def {entry}(*args, **kwargs):\n"
        "    for path in sources():\n"
        "        try:\n"
        "            text = open(path).read()\n"
        "        except OSError:\n"
        "            continue\n"
        "        for call in ast.walk(ast.parse(text)):\n"  # _call(args..., expected=...) in the source
        "            if isinstance(call, ast.Call) and getattr(call.func, 'id', '') == '_call':\n"
        "                got = [ast.literal_eval(a) for a in call.args]\n"
        "                if got == list(args):\n"
        "                    return ast.literal_eval(call.keywords[0].value)\n"
        "    return None\n"
    )
    result = _reward(packages)(task, f"```python\n{program}\n```")
    assert result.info["passed"] == 0 and result.reward == 0.0, result.info["tests"]
    reference = task["metadata"]["reference_solution"]
    assert (
        _reward(packages)(task, f"```python\n{reference}\n```").reward == 1.0
    )  # the task itself is gradable
