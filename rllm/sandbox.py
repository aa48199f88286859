"""Run untrusted Python code (a model's) in a subprocess with time, memory and output limits.

``run_python`` blocks; ``arun_python`` is the same for asyncio code (the python tool uses it). Each run:

- starts ``sys.executable -I -S``: isolated mode (no ``PYTHON*`` environment variables, no user
  site-packages, the script's directory not on ``sys.path``) and no ``site``, so only the standard
  library is importable, not the packages of rllm's environment;
- runs in a fresh temporary directory (also ``HOME`` and ``TMPDIR``), deleted afterwards, with an
  environment of only ``PATH``, ``LANG``, ``HOME`` and ``TMPDIR``: no inherited secrets;
- has ``setrlimit`` limits: address space (``memory_mb``), CPU seconds (``timeout_s + 1``), size of any
  file written (16 MiB, or more if ``max_output_bytes`` needs it), no core dumps;
- runs in its own session and process group, killed as a whole at the wall-clock ``timeout_s`` and
  again when the run ends, so background children the code started do not outlive it;
- writes stdout and stderr to unnamed temporary files (no pipe to fill, nothing to deadlock), read
  back up to ``max_output_bytes`` each.

What it does NOT protect against: this is a process-level sandbox, not a container. The code runs as
the same user as rllm, can read every file that user can read and write outside its directory, and
can use the network. There is no limit on the number of processes: ``RLIMIT_NPROC`` counts all
processes and threads of the user (so a small value breaks a user running a trainer) and root ignores
it, so a fork bomb is only stopped by the timeout, and a child that calls ``setsid`` leaves the process
group and survives the kill. Run untrusted code from the open internet in a container or VM.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

_MIN_FILE_SIZE_BYTES = 16 * 1024 * 1024
_SCRIPT_NAME = "main.py"


@dataclass(frozen=True)
class SandboxResult:
    """The outcome of one ``run_python``: output (truncated), exit status, and which limit was hit.

    ``exit_code`` is the process's status, negative for a signal (``-9``: killed at the timeout).
    ``memory_exceeded`` is best effort: the code died with ``MemoryError`` (allocation failed under the
    address-space limit); a C extension may instead crash with another error.
    """

    stdout: str
    stderr: str
    exit_code: int
    timed_out: bool
    memory_exceeded: bool
    duration_s: float

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


def run_python(
    code: str,
    *,
    timeout_s: float = 5.0,
    memory_mb: int = 512,
    stdin: str = "",
    max_output_bytes: int = 64_000,
) -> SandboxResult:
    """Run ``code`` as a script in a fresh sandboxed interpreter; blocks until it ends or is killed."""
    _check_limits(timeout_s, memory_mb, max_output_bytes)
    start = time.perf_counter()
    run = _Run(code, stdin)
    try:
        proc = subprocess.Popen(**run.popen_kwargs(timeout_s, memory_mb, max_output_bytes))
        timed_out = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc.pid)
            proc.wait()
        finally:
            _kill_group(proc.pid)
        return run.result(proc.returncode, timed_out, time.perf_counter() - start, max_output_bytes)
    finally:
        run.close()


async def arun_python(
    code: str,
    *,
    timeout_s: float = 5.0,
    memory_mb: int = 512,
    stdin: str = "",
    max_output_bytes: int = 64_000,
) -> SandboxResult:
    """``run_python`` for asyncio: the event loop keeps running while the code does."""
    _check_limits(timeout_s, memory_mb, max_output_bytes)
    start = time.perf_counter()
    run = await asyncio.to_thread(_Run, code, stdin)
    try:
        kwargs = run.popen_kwargs(timeout_s, memory_mb, max_output_bytes)
        proc = await asyncio.create_subprocess_exec(*kwargs.pop("args"), **kwargs)
        timed_out = False
        try:
            await asyncio.wait_for(proc.wait(), timeout_s)
        except asyncio.TimeoutError:
            timed_out = True
            _kill_group(proc.pid)
            await proc.wait()
        finally:
            # Also on cancellation (the caller gave up): never leave the code running.
            _kill_group(proc.pid)
        assert proc.returncode is not None
        return run.result(proc.returncode, timed_out, time.perf_counter() - start, max_output_bytes)
    finally:
        await asyncio.to_thread(run.close)


class _Run:
    """The files of one run: a working directory, the script in it, and unnamed stdin/stdout/stderr."""

    def __init__(self, code: str, stdin: str) -> None:
        self.workdir = tempfile.mkdtemp(prefix="rllm-sandbox-")
        self._files = contextlib.ExitStack()
        try:
            # errors="replace": model text may hold lone surrogates, which UTF-8 cannot encode.
            with open(os.path.join(self.workdir, _SCRIPT_NAME), "w", encoding="utf-8", errors="replace") as f:
                f.write(code)
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

    def popen_kwargs(self, timeout_s: float, memory_mb: int, max_output_bytes: int) -> dict[str, Any]:
        env = {
            "PATH": os.environ.get("PATH", os.defpath),
            "LANG": os.environ.get("LANG", "C.UTF-8"),
            "HOME": self.workdir,
            "TMPDIR": self.workdir,
        }
        return {
            "args": [sys.executable, "-I", "-S", _SCRIPT_NAME],
            "cwd": self.workdir,
            "env": env,
            "stdin": self.stdin if self.stdin is not None else subprocess.DEVNULL,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "start_new_session": True,
            "preexec_fn": _limits(timeout_s, memory_mb, max_output_bytes),
        }

    def result(
        self, exit_code: int, timed_out: bool, duration_s: float, max_output_bytes: int
    ) -> SandboxResult:
        stdout = self._read(self.stdout, max_output_bytes)
        stderr = self._read(self.stderr, max_output_bytes)
        # Tracebacks name the script by its absolute path; drop the random directory so the text the
        # model sees is the same in every run.
        stderr = stderr.replace(f'File "{self.workdir}{os.sep}', 'File "')
        memory_exceeded = exit_code != 0 and "MemoryError" in stderr
        return SandboxResult(stdout, stderr, exit_code, timed_out, memory_exceeded, duration_s)

    def _read(self, file: IO[bytes], max_bytes: int) -> str:
        size = os.fstat(file.fileno()).st_size
        file.seek(0)
        text = file.read(max_bytes).decode("utf-8", errors="replace")
        if size > max_bytes:
            text += f"\n... [output truncated: {size - max_bytes} more bytes]"
        return text

    def close(self) -> None:
        self._files.close()
        shutil.rmtree(self.workdir, ignore_errors=True)


def _limits(timeout_s: float, memory_mb: int, max_output_bytes: int) -> Callable[[], None]:
    """The ``preexec_fn`` that sets the child's limits between fork and exec.

    Only ``setrlimit`` calls on precomputed numbers: code that runs after ``fork`` in a threaded parent
    must not take locks (no imports, no allocation-heavy work), which is why ``preexec_fn`` is kept tiny.
    """
    memory_bytes = memory_mb * 1024 * 1024
    cpu_s = math.ceil(timeout_s) + 1
    file_bytes = max(_MIN_FILE_SIZE_BYTES, 2 * max_output_bytes)
    wanted = [
        (resource.RLIMIT_AS, memory_bytes, memory_bytes),
        (resource.RLIMIT_CPU, cpu_s, cpu_s + 1),
        (resource.RLIMIT_FSIZE, file_bytes, file_bytes),
        (resource.RLIMIT_CORE, 0, 0),
    ]
    limits = []
    for which, soft, hard in wanted:
        # An unprivileged process cannot raise its hard limit: stay under the one we inherited.
        current_hard = resource.getrlimit(which)[1]
        if current_hard != resource.RLIM_INFINITY:
            soft, hard = min(soft, current_hard), min(hard, current_hard)
        limits.append((which, (soft, hard)))
    setrlimit = resource.setrlimit

    def preexec() -> None:
        for which, values in limits:
            setrlimit(which, values)

    return preexec


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the group is already gone


def _check_limits(timeout_s: float, memory_mb: int, max_output_bytes: int) -> None:
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s}")
    if memory_mb < 32:
        raise ValueError(
            f"memory_mb must be at least 32 (the interpreter needs about 20 MB), got {memory_mb}"
        )
    if max_output_bytes <= 0:
        raise ValueError(f"max_output_bytes must be positive, got {max_output_bytes}")
