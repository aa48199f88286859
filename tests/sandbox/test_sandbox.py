"""rllm.sandbox: results, limits, the scrubbed environment and work dir, killing, the async and blocking APIs,
what ``protections()`` reports, and the fallbacks when bubblewrap is missing."""

from __future__ import annotations

import asyncio
import os
import select
import shutil
import time

import pytest

from rllm.sandbox import SandboxResult, SandboxUnavailable, arun_python, protections, run_python

pytestmark = pytest.mark.usefixtures(
    "bubblewrap"
)  # auto is bubblewrap; tests/sandbox/test_choice.py: without


def _closed_by_everyone(read_fd: int, wait_s: float = 3.0) -> bool:
    """True once every holder of the pipe's write end is gone (EOF), False if one still holds it."""
    deadline = time.monotonic() + wait_s
    while (left := deadline - time.monotonic()) > 0:
        if select.select([read_fd], [], [], left)[0] and os.read(read_fd, 4096) == b"":
            return True
    return False


def test_output_stdin_and_exit_code() -> None:
    result = run_python("import sys\nname = input()\nprint('hi', name)\nsys.exit(3)", stdin="Ada\n")
    assert isinstance(result, SandboxResult)
    assert (result.stdout, result.stderr, result.exit_code) == ("hi Ada\n", "", 3)
    assert not result.timed_out and not result.memory_exceeded and not result.ok
    assert result.killed_reason is None
    assert 0 < result.duration_s < 5 and result.cpu_s >= 0


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


def test_home_and_tmpdir_are_the_work_dir_which_is_removed() -> None:
    code = (
        "import os, tempfile\n"
        "open('out.txt', 'w').write('x')\n"
        "print(os.getcwd(), os.environ['HOME'], tempfile.gettempdir())\n"
    )
    cwd, home, tmp = run_python(code).stdout.split()
    assert cwd == home == tmp and os.path.basename(cwd).startswith("rllm-sandbox-")
    assert not os.path.exists(cwd)


def test_timeout_kills_the_whole_tree() -> None:
    read_fd, write_fd = os.pipe()
    code = (
        "import os, sys, time\n"
        "if os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\n"  # a child that leaves the process group
        "time.sleep(60)\n"
    )
    start = time.perf_counter()
    result = run_python(code, timeout_s=1.0, pass_fds=[write_fd])
    assert time.perf_counter() - start < 3.0
    assert result.timed_out and result.exit_code == -9 and not result.ok and result.killed_reason == "timeout"
    # Under bwrap (auto) the pid namespace takes the setsid child along; the group kill alone would not.
    assert result.protections["isolation"] == "bwrap" and _closed_by_everyone(read_fd)
    os.close(read_fd)


def test_memory_limit() -> None:
    result = run_python("x = bytearray(400 * 1024 * 1024)\nprint('allocated')", memory_mb=128)
    assert result.memory_exceeded and result.exit_code == 1
    assert result.stdout == "" and result.stderr.endswith("MemoryError\n")
    assert run_python("x = bytearray(10 * 1024 * 1024)\nprint('ok')", memory_mb=128).stdout == "ok\n"


def test_output_is_truncated_with_a_marker() -> None:
    result = run_python("print('x' * 5000)", max_output_bytes=100)
    assert result.stdout == "x" * 100 + "\n... [output truncated: 4901 more bytes]"


def test_a_signal_is_a_negative_exit_code_and_the_killed_reason() -> None:
    result = run_python("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)")
    assert result.exit_code == -11 and result.killed_reason == "signal SIGSEGV" and not result.timed_out
    busy = run_python("import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass")
    assert busy.ok and busy.cpu_s >= 0.2


def test_files_args_and_passed_descriptors() -> None:
    read_fd, write_fd = os.pipe()
    code = (
        "import os, sys\n"
        "data = open('data.txt').read()\n"
        "os.write(int(sys.argv[2]), (data + sys.argv[1]).encode())\n"
    )
    result = run_python(
        code, files={"data.txt": "from a file, "}, args=["from argv", str(write_fd)], pass_fds=[write_fd]
    )
    assert result.ok, result.stderr
    with pytest.raises(OSError):  # taken over: closed here once the program started
        os.fstat(write_fd)
    assert os.read(read_fd, 100) == b"from a file, from argv"
    os.close(read_fd)


def test_async_runs_do_not_block_each_other() -> None:
    async def main() -> list[SandboxResult]:
        sleepers = [arun_python(f"import time; time.sleep(1); print({i})") for i in range(3)]
        return await asyncio.gather(*sleepers, arun_python("while True: pass", timeout_s=1.0))

    start = time.perf_counter()
    results = asyncio.run(main())
    assert time.perf_counter() - start < 2.5  # about one run, not the 4 s of four in a row
    assert [r.stdout for r in results] == ["0\n", "1\n", "2\n", ""]
    assert results[-1].timed_out


def test_blocking_call_inside_a_running_event_loop() -> None:
    async def main() -> SandboxResult:
        return run_python("print('from a loop')")  # a private loop in a thread: no "loop already running"

    assert asyncio.run(main()).stdout == "from a loop\n"


def test_cancelling_a_run_kills_the_program() -> None:
    read_fd, write_fd = os.pipe()

    async def main() -> None:
        sleeper = arun_python("import time\ntime.sleep(60)", timeout_s=30, pass_fds=[write_fd])
        task = asyncio.create_task(sleeper)
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    start = time.perf_counter()
    asyncio.run(main())
    assert time.perf_counter() - start < 3.0
    assert _closed_by_everyone(read_fd)
    os.close(read_fd)


def test_protections_describe_the_tool_and_the_limits() -> None:
    described = protections(timeout_s=2, memory_mb=256, max_processes=5, max_output_bytes=1000)
    assert described["isolation"] in ("bwrap", "unshare", "none")
    assert described["memory"] == "RLIMIT_AS 256 MiB per process"
    assert described["wall_time"].startswith("2 s") and described["output"].startswith("1000 bytes")
    assert set(described) >= {"user", "filesystem", "network", "process_tree", "process_count", "environment"}
    result = run_python("pass", timeout_s=2, memory_mb=256, max_processes=5, max_output_bytes=1000)
    assert result.protections == described


@pytest.mark.parametrize("isolation", ["unshare", "none"])
def test_fallback_isolations_run_and_say_what_they_lack(isolation: str) -> None:
    if isolation == "unshare" and shutil.which("unshare") is None:
        pytest.skip("util-linux unshare is not installed")
    try:
        described = protections(isolation)
    except SandboxUnavailable as e:
        pytest.skip(f"{isolation} does not work here: {e}")
    result = run_python("import os\nprint('hi', os.getcwd() == os.environ['HOME'])", isolation=isolation)
    assert result.ok and result.stdout == "hi True\n", result.stderr
    assert result.protections["isolation"] == isolation == described["isolation"]
    network_isolated = "namespace" in described["network"]
    assert network_isolated == (isolation == "unshare")
    assert "ALL readable" in described["filesystem"]  # only bwrap hides the host's files


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({"timeout_s": 0}, "timeout_s"),
        ({"memory_mb": 8}, "memory_mb"),
        ({"max_output_bytes": 0}, "max_output"),
        ({"max_processes": 0}, "max_processes"),
        ({"isolation": "docker"}, "isolation"),
        ({"files": {"../x": ""}}, "plain file name"),
        ({"files": {"main.py": ""}}, "plain file name"),
        ({"pass_fds": [1]}, "pass_fds"),
    ],
)
def test_bad_arguments_are_refused(limits: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        run_python("pass", **limits)  # type: ignore[arg-type]
