"""`.ci/run` fails CI when any tier's set-up fails, and never runs that tier's tests.

Each test copies the real `.ci/run` into a temp directory laid out like the repository, with set-up
scripts that exit with a chosen status and a FAKE `.venv/bin/python` (a shell script, `fake_python.sh`,
linked there) that records every call and exits 0, or 5 for pytest when told to (pytest's "no tests
collected"). Then it runs `bash .ci/run` for real and reads the exit status and the record.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README_TEST_COMMAND = "bash scripts/setup.sh && .venv/bin/python -m pytest -q"
SETUP_SCRIPTS = (
    "setup.sh",
    "setup_cookbook.sh",
    "setup_strands.sh",
    "setup_ui_tests.sh",
    "setup_vllm.sh",
    "setup_bench.sh",
    "gpu_check.sh",  # not a set-up script, but CI runs it the same way (bash scripts/...)
)

FAKE_PYTHON = """#!/usr/bin/env bash
# FAKE python (and ruff, lint-imports, deptry) for tests/test_ci_script.py: records its arguments, runs nothing.
echo "$(basename "$0") $*" >> "$FAKE_CALLS"
if [[ "$*" == *"-m pytest"* && -n "${FAKE_PYTEST_STATUS:-}" ]]; then exit "$FAKE_PYTEST_STATUS"; fi
exit 0
"""


def fake_repo(tmp_path: Path, failing: dict[str, int]) -> Path:
    """A copy of .ci/run beside fake set-up scripts (``failing`` maps a script name to its exit status;
    every call of a set-up script is recorded) and the fake python."""
    repo = tmp_path / "repo"
    (repo / ".ci").mkdir(parents=True)
    shutil.copy(ROOT / ".ci" / "run", repo / ".ci" / "run")
    (repo / "scripts").mkdir()
    for name in SETUP_SCRIPTS:
        status = failing.get(name, 0)
        (repo / "scripts" / name).write_text(
            f'#!/usr/bin/env bash\necho "{name} $*" >> "$FAKE_CALLS"\nexit {status}\n'
        )
    (repo / ".venv" / "bin").mkdir(parents=True)
    fake = repo / "fake_python.sh"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    for tool in ("python", "ruff", "lint-imports", "deptry"):
        (repo / ".venv" / "bin" / tool).symlink_to(fake)
    (repo / ".venv-strands" / "bin").mkdir(parents=True)
    (repo / ".venv-strands" / "bin" / "python").symlink_to(fake)
    return repo


def run_ci(repo: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    calls = repo / "calls.log"
    calls.touch()
    proc = subprocess.run(
        ["bash", str(repo / ".ci" / "run")],
        env={**os.environ, "FAKE_CALLS": str(calls), **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return proc, calls.read_text().splitlines()


def pytest_calls(calls: list[str]) -> list[str]:
    return [c for c in calls if c.startswith("python") and "-m pytest" in c]


def test_ci_script_keeps_the_readme_test_command_verbatim() -> None:
    assert README_TEST_COMMAND in (ROOT / "README.md").read_text(), "README.md's test command changed"
    assert README_TEST_COMMAND in (ROOT / ".ci" / "run").read_text(), (
        ".ci/run no longer runs the README's command"
    )


def test_every_tier_runs_when_every_setup_succeeds(tmp_path: Path) -> None:
    proc, calls = run_ci(fake_repo(tmp_path, {}))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[ci] every tier passed" in proc.stdout
    assert "python -m pytest -q" in calls  # the README's test command
    assert "lint-imports --no-cache" in calls and "deptry ." in calls
    assert "ruff format --check rllm tests benchmarks scripts examples docker" in calls
    assert "ruff check rllm tests benchmarks scripts examples docker" in calls
    assert (
        "setup.sh langgraph mcp smolagents openai-agents deploy-tests tinker-cookbook wandb mlflow" in calls
    )
    assert any(c.startswith("python -m pytest") and "tests/test_tracking_sinks.py" in c for c in calls)
    assert "setup_cookbook.sh " in calls
    assert any(c.startswith("python -m pytest") and "tests/test_deploy.py" in c for c in calls)
    assert any(c.startswith("python -m pytest") and "tests/serve/test_tinker_cookbook.py" in c for c in calls)
    assert "setup_strands.sh " in calls
    assert "python -c import strands, strands.models.openai" in calls
    assert "python -m pytest -q tests/test_strands_example.py" in calls
    assert any("-m pytest -q -m slow or vllm" in c for c in calls)
    assert "python -m pytest -q -m distributed" in calls
    assert "setup.sh distributed" in calls
    assert "gpu_check.sh --dry-run" in calls
    benchmarks = [c for c in calls if "benchmarks/" in c]
    scripts = [p for p in (ROOT / "benchmarks").glob("*.py") if not p.name.startswith("_")]  # _*: helpers
    assert len(benchmarks) == len(scripts) and all(" --quick" in c for c in benchmarks), benchmarks


def test_failing_first_setup_fails_ci_and_runs_no_tests(tmp_path: Path) -> None:
    proc, calls = run_ci(fake_repo(tmp_path, {"setup.sh": 3}))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert pytest_calls(calls) == [], calls
    assert "FAILED in tier 'fast (README test command)'" in proc.stdout


@pytest.mark.parametrize(
    ("script", "tier", "tests_before"),
    [
        ("setup_strands.sh", "strands (.venv-strands)", 2),
        ("setup_ui_tests.sh", "ui browser", 3),
        ("setup_bench.sh", "benchmarks --quick", 5),
        ("setup_vllm.sh", "slow and vllm", 5),
    ],
)
def test_failing_later_setup_fails_ci_and_skips_its_tests(
    tmp_path: Path, script: str, tier: str, tests_before: int
) -> None:
    proc, calls = run_ci(fake_repo(tmp_path, {script: 4}))
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert f"FAILED in tier '{tier}'" in proc.stdout
    # The tiers before it ran their tests; nothing after the failing set-up ran.
    assert len(pytest_calls(calls)) == tests_before, calls
    failed_at = next(i for i, c in enumerate(calls) if c.startswith(script))
    after = calls[failed_at + 1 :]
    assert all(c.startswith("python -c") for c in after), after  # only the EXIT trap's version probe


def test_pytest_collecting_no_tests_fails_ci(tmp_path: Path) -> None:
    proc, calls = run_ci(fake_repo(tmp_path, {}), FAKE_PYTEST_STATUS="5")
    assert proc.returncode == 5, proc.stdout + proc.stderr
    assert pytest_calls(calls) == ["python -m pytest -q"], calls  # stopped at the first pytest
    assert "FAILED in tier 'fast (README test command)'" in proc.stdout


def test_ci_runs_every_benchmark_in_its_quick_mode() -> None:
    """A benchmark added to benchmarks/ without a CI line (or without --quick) fails here."""
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    for script in sorted((ROOT / "benchmarks").glob("bench_*.py")):
        line = f".venv/bin/python benchmarks/{script.name} --quick"
        assert any(c.startswith(line) for c in ci), f".ci/run does not run `{line}`"
