"""One run: its work dir and files, the process started under a plan, waiting, killing, reaping, the result;
and ``run_blocking``, which runs such a coroutine from blocking code."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Coroutine, Sequence
from typing import IO, TYPE_CHECKING, Any, TypeVar

from rllm.sandbox._types import SCRIPT_NAME, Limits, SandboxResult
from rllm.sandbox._uids import UidLease

if TYPE_CHECKING:
    from rllm.sandbox._isolation import Plan
    from rllm.sandbox._packages import Package

_T = TypeVar("_T")

_SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"


class Workdir:
    """The files of one run: a private host directory holding ``main.py`` and the extra files, and unnamed
    stdin/stdout/stderr files (no pipe to fill, nothing to deadlock)."""

    def __init__(self, code: str, files: dict[str, str], stdin: str) -> None:
        for name in files:
            if not name or name in (".", "..", SCRIPT_NAME) or os.sep in name:
                raise ValueError(f"files: {name!r} is not a plain file name other than {SCRIPT_NAME}")
        self.path = tempfile.mkdtemp(prefix="rllm-sandbox-")
        self.names = [SCRIPT_NAME, *files]
        self._files = contextlib.ExitStack()
        try:
            for name, text in {SCRIPT_NAME: code, **files}.items():
                # errors="replace": model text may hold lone surrogates, which UTF-8 cannot encode.
                with open(os.path.join(self.path, name), "w", encoding="utf-8", errors="replace") as f:
                    f.write(text)
            self.stdout = self._unnamed_file()
            self.stderr = self._unnamed_file()
            self.stdin: IO[bytes] | None = None
            if stdin:
                self.stdin = self._unnamed_file()
                self.stdin.write(stdin.encode("utf-8", errors="replace"))
                self.stdin.seek(0)
        except BaseException:
            self.close()
            raise

    def _unnamed_file(self) -> IO[bytes]:
        return self._files.enter_context(tempfile.TemporaryFile())

    def env(self) -> dict[str, str]:
        return {"PATH": _SANDBOX_PATH, "LANG": "C.UTF-8", "HOME": self.path, "TMPDIR": self.path}

    def read(self, file: IO[bytes], max_bytes: int) -> str:
        size = os.fstat(file.fileno()).st_size
        file.seek(0)
        text = file.read(max_bytes).decode("utf-8", errors="replace")
        if size > max_bytes:
            text += f"\n... [output truncated: {size - max_bytes} more bytes]"
        return text

    def close(self) -> None:
        self._files.close()
        shutil.rmtree(self.path, ignore_errors=True)


async def execute(
    plan: Plan,
    workdir: Workdir,
    limits: Limits,
    args: list[str],
    pass_fds: tuple[int, ...],
    packages: tuple[Package, ...] = (),
) -> SandboxResult:
    """Run ``workdir``'s ``main.py`` under ``plan`` to its end or its timeout, ``packages`` importable;
    ``pass_fds`` are closed here."""
    start = time.perf_counter()
    report_r, report_w = os.pipe()
    os.set_blocking(report_r, False)
    lease = None
    try:
        try:
            lease = UidLease.take(sweep=plan.tool == "none") if plan.drop_uid else None
            if lease is not None and plan.tool != "bwrap":
                os.chown(workdir.path, lease.uid, lease.uid)  # under bwrap the work dir is a fresh tmpfs
            # Popen, not asyncio's subprocess: its fork/exec blocks as briefly, and owning the wait lets
            # the group be killed before the leader is reaped.
            proc = subprocess.Popen(  # noqa: ASYNC220
                plan.argv(workdir, limits, None if lease is None else lease.uid, report_w, args, packages),
                stdin=workdir.stdin if workdir.stdin is not None else subprocess.DEVNULL,
                stdout=workdir.stdout,
                stderr=workdir.stderr,
                cwd=workdir.path,
                env=workdir.env(),
                start_new_session=True,
                pass_fds=(report_w, *pass_fds),
            )
        finally:
            close_all((report_w, *pass_fds))
        timed_out = False
        try:
            timed_out = not await _wait_for_exit(proc.pid, limits.timeout_s)
        finally:
            # Also on cancellation (the caller gave up): never leave the code running. The group is killed
            # before the leader is reaped, while its pid (the group's id) cannot be reused.
            _kill_group(proc.pid)
            wrapper_exit_code = _reap(proc)
        try:
            report = os.read(report_r, 100).split()
        except BlockingIOError:
            report = []
    finally:
        os.close(report_r)
        if lease is not None:
            await asyncio.to_thread(lease.release)
    if len(report) == 2:  # the launcher saw the program end
        exit_code, cpu_s = os.waitstatus_to_exitcode(int(report[0])), float(report[1])
    else:  # killed at the timeout, or the sandbox failed before the program ran
        exit_code, cpu_s = wrapper_exit_code, None
    stdout = workdir.read(workdir.stdout, limits.max_output_bytes)
    stderr = workdir.read(workdir.stderr, limits.max_output_bytes)
    # Tracebacks name the script by its absolute path; drop the random directory so the text the model
    # sees is the same in every run.
    stderr = stderr.replace(f'File "{workdir.path}{os.sep}', 'File "')
    return SandboxResult(
        stdout=stdout,
        stderr=stderr,
        exit_code=exit_code,
        timed_out=timed_out,
        memory_exceeded=exit_code != 0 and "MemoryError" in stderr,
        duration_s=time.perf_counter() - start,
        cpu_s=cpu_s,
        killed_reason=_killed_reason(exit_code, timed_out, cpu_s, limits),
        protections=plan.describe(limits, packages),
    )


async def _wait_for_exit(pid: int, timeout_s: float) -> bool:
    """True once ``pid`` has exited (it is not reaped), False if it still runs after ``timeout_s``."""
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # not Linux >= 5.3: poll instead
        deadline = time.monotonic() + timeout_s
        while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:  # noqa: ASYNC222
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.01)
        return True
    loop = asyncio.get_running_loop()
    exited = asyncio.Event()
    loop.add_reader(pidfd, exited.set)
    try:
        await asyncio.wait_for(exited.wait(), timeout_s)
        return True
    except asyncio.TimeoutError:
        return False
    finally:
        loop.remove_reader(pidfd)
        os.close(pidfd)


def _reap(proc: subprocess.Popen[bytes]) -> int:
    """The exit code of ``proc`` (already dead or killed), which is now reaped."""
    try:
        _, status = os.waitpid(proc.pid, 0)
    except ChildProcessError:  # reaped by someone else (a SIGCHLD handler elsewhere in this process)
        status = 255 << 8
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode


def _killed_reason(exit_code: int, timed_out: bool, cpu_s: float | None, limits: Limits) -> str | None:
    if timed_out:
        return "timeout"
    if exit_code >= 0:
        return None
    if -exit_code == signal.SIGXCPU or (-exit_code == signal.SIGKILL and (cpu_s or 0) >= limits.cpu_s):
        return "cpu_time"
    try:
        return f"signal {signal.Signals(-exit_code).name}"
    except ValueError:
        return f"signal {-exit_code}"


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the group is already gone


def close_all(fds: Sequence[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def run_blocking(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coro`` to the end from blocking code: in a private event loop, in a thread of its own when
    this thread already runs a loop (which cannot be re-entered)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()
