"""rllm.sandbox: limits, isolation of the environment and the working directory, killing, truncation."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from rllm.sandbox import SandboxResult, arun_python, run_python


def test_output_stdin_and_exit_code() -> None:
    result = run_python("import sys\nname = input()\nprint('hi', name)\nsys.exit(3)", stdin="Ada\n")
    assert isinstance(result, SandboxResult)
    assert (result.stdout, result.stderr, result.exit_code) == ("hi Ada\n", "", 3)
    assert not result.timed_out and not result.memory_exceeded and not result.ok
    assert 0 < result.duration_s < 5


def test_no_inherited_environment_and_only_the_standard_library(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLLM_TEST_SECRET", "hunter2")
    code = (
        "import os, sys\n"
        "print(sorted(os.environ))\n"
        "print(sys.flags.isolated, sys.flags.no_site)\n"
        "try:\n    import pydantic\nexcept ImportError:\n    print('no site-packages')\n"
    )
    result = run_python(code)
    assert result.ok, result.stderr
    env_line, flags, packages = result.stdout.splitlines()
    assert "RLLM_TEST_SECRET" not in env_line and "hunter2" not in result.stdout
    assert {"'HOME'", "'PATH'", "'TMPDIR'"} <= set(env_line.strip("[]").split(", "))
    assert flags == "1 1"
    assert packages == "no site-packages"


def test_timeout_kills_the_process_group() -> None:
    code = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    start = time.perf_counter()
    result = run_python(code, timeout_s=1.0)
    assert time.perf_counter() - start < 3.0
    assert result.timed_out and result.exit_code == -9 and not result.ok
    child_pid = int(result.stdout)
    time.sleep(0.1)
    assert not _alive(child_pid)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"  # a zombie is dead, just not yet reaped
    except FileNotFoundError:
        return False


def test_memory_limit() -> None:
    result = run_python("x = bytearray(400 * 1024 * 1024)\nprint('allocated')", memory_mb=128)
    assert result.memory_exceeded and result.exit_code == 1
    assert result.stdout == "" and result.stderr.endswith("MemoryError\n")
    assert run_python("x = bytearray(10 * 1024 * 1024)\nprint('ok')", memory_mb=128).stdout == "ok\n"


def test_output_is_truncated_with_a_marker() -> None:
    result = run_python("print('x' * 5000)", max_output_bytes=100)
    assert result.stdout == "x" * 100 + "\n... [output truncated: 4901 more bytes]"


def test_temporary_directory_is_removed() -> None:
    result = run_python("import os, tempfile\nopen(tempfile.mktemp(), 'w').write('x')\nprint(os.getcwd())")
    workdir = result.stdout.strip()
    assert workdir and not os.path.exists(workdir)


def test_async_runs_do_not_block_each_other() -> None:
    async def main() -> list[SandboxResult]:
        sleepers = [arun_python(f"import time; time.sleep(1); print({i})") for i in range(3)]
        return await asyncio.gather(*sleepers, arun_python("while True: pass", timeout_s=1.0))

    start = time.perf_counter()
    results = asyncio.run(main())
    assert time.perf_counter() - start < 2.5  # about one run, not the 4 s of four in a row
    assert [r.stdout for r in results] == ["0\n", "1\n", "2\n", ""]
    assert results[-1].timed_out


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({"timeout_s": 0}, "timeout_s"),
        ({"memory_mb": 8}, "memory_mb"),
        ({"max_output_bytes": 0}, "max_output"),
    ],
)
def test_bad_limits_are_refused(limits: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        run_python("pass", **limits)  # type: ignore[arg-type]
