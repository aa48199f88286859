"""tests/ci_support.py bites: a test whose piece is missing skips on a developer's machine and fails under
CI (``CI=true``, or ``$RLLM_TEST_EXTRAS`` naming its extra), shown by running pytest in a subprocess on a
tiny test file and on a real vLLM-tier file with no vLLM venv."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from ci_support import require_vllm

ROOT = Path(__file__).resolve().parent.parent

TINY_TESTS = """
from ci_support import skip_or_fail


def test_needs_a_widget():
    skip_or_fail("no widget here: install it")


def test_needs_a_gadget_of_an_extra():
    skip_or_fail("no gadget here: install the gadgets extra", extra="gadgets")
"""


def run_pytest(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """pytest in a subprocess, with ``env`` in place of the CI switches of this run's environment."""
    base = {k: v for k, v in os.environ.items() if k not in ("CI", "RLLM_TEST_EXTRAS")}
    path = os.pathsep.join(filter(None, [str(ROOT / "tests"), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider", *args],
        cwd=cwd,
        env={**base, "PYTHONPATH": path, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    ("env", "summary"),
    [
        ({}, "2 skipped"),
        ({"CI": "true"}, "1 failed, 1 skipped"),  # the extra's piece is not CI's to install everywhere
        ({"RLLM_TEST_EXTRAS": "other,gadgets"}, "1 failed, 1 skipped"),
    ],
)
def test_a_missing_piece_skips_here_and_fails_where_it_must_be_there(
    tmp_path: Path, env: dict[str, str], summary: str
) -> None:
    (tmp_path / "test_tiny.py").write_text(TINY_TESTS)
    proc = run_pytest(["test_tiny.py"], tmp_path, **env)
    assert summary in proc.stdout.splitlines()[-1], proc.stdout + proc.stderr
    failed = "FAILED test_tiny.py::test_needs_a_widget - Failed: no widget here: install it (CI=true"
    assert (failed in proc.stdout) == ("CI" in env), proc.stdout


def test_a_vllm_tier_test_fails_under_ci_without_a_vllm_venv(tmp_path: Path) -> None:
    """The marker alone does it (tests/conftest.py): no server is started, the test errors at set-up."""
    proc = run_pytest(
        ["-m", "vllm", "tests/slow/test_vllm_responses.py"],
        ROOT,
        CI="true",
        RLLM_VLLM_VENV=str(tmp_path / "no-venv"),
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert re.match(r"\d+ errors? in ", proc.stdout.splitlines()[-1]), proc.stdout  # none skipped or passed
    assert f"no vLLM venv at {tmp_path / 'no-venv'}: bash scripts/setup_vllm.sh" in proc.stdout


@pytest.mark.parametrize(("ci", "outcome"), [("true", pytest.fail.Exception), ("", pytest.skip.Exception)])
def test_a_venv_without_vllm_is_missing_vllm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ci: str, outcome: type[BaseException]
) -> None:
    (tmp_path / "bin").mkdir()
    python = tmp_path / "bin" / "python"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')  # -S: no site-packages, no vllm
    python.chmod(0o755)
    monkeypatch.setenv("RLLM_VLLM_VENV", str(tmp_path))
    monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome, match="vllm is not installed in the venv of"):
        require_vllm()
