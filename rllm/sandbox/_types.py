"""What a run returns (``SandboxResult``), the error for a missing tool, and the validated limits of a run."""

from __future__ import annotations

import math
import resource
from dataclasses import dataclass, field

MiB = 1024 * 1024
SCRIPT_NAME = "main.py"
SHM_BYTES = 16 * MiB
_MIN_FILE_SIZE_BYTES = 16 * MiB


@dataclass(frozen=True)
class SandboxResult:
    """The outcome of one run: output (truncated), how it ended, and what protected it.

    ``exit_code`` is the program's status, negative for a signal (``-9``: killed at the timeout).
    ``killed_reason`` says why it did not end by itself: ``"timeout"`` (wall clock), ``"cpu_time"``
    (``RLIMIT_CPU``) or ``"signal SIGSEGV"`` and the like; None when it exited on its own.
    ``memory_exceeded`` is best effort: the code died with ``MemoryError`` (an allocation failed under the
    address-space limit); a C extension may crash another way. ``cpu_s`` is the user + system time of the
    program and the children it waited for; None when it was killed before it could be measured.
    ``protections`` is ``protections()`` for this run's limits.
    """

    stdout: str
    stderr: str
    exit_code: int
    timed_out: bool
    memory_exceeded: bool
    duration_s: float
    cpu_s: float | None = None
    killed_reason: str | None = None
    protections: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


class SandboxUnavailable(RuntimeError):
    """The isolation asked for cannot run on this machine (the message says what to install or enable)."""


@dataclass(frozen=True)
class Limits:
    """The limits of one run, checked when made; the derived CPU, file and work-dir sizes."""

    timeout_s: float
    memory_mb: int
    max_processes: int
    max_output_bytes: int

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be positive, got {self.timeout_s}")
        if self.memory_mb < 32:
            raise ValueError(
                f"memory_mb must be at least 32 (the interpreter needs about 20 MB), got {self.memory_mb}"
            )
        if self.max_processes < 1:
            raise ValueError(
                f"max_processes must be at least 1 (the program itself), got {self.max_processes}"
            )
        if self.max_output_bytes <= 0:
            raise ValueError(f"max_output_bytes must be positive, got {self.max_output_bytes}")

    @property
    def cpu_s(self) -> int:
        return math.ceil(self.timeout_s) + 1

    @property
    def file_bytes(self) -> int:
        return max(_MIN_FILE_SIZE_BYTES, 2 * self.max_output_bytes)

    @property
    def workdir_bytes(self) -> int:
        return 4 * self.file_bytes

    def rlimits(self, nproc: int | None) -> str:
        """The launcher's argument: ``NAME:soft:hard`` items, kept under the hard limits we inherited (an
        unprivileged process cannot raise those)."""
        memory = self.memory_mb * MiB
        wanted = [
            ("AS", memory, memory),
            ("CPU", self.cpu_s, self.cpu_s + 1),
            ("FSIZE", self.file_bytes, self.file_bytes),
            ("CORE", 0, 0),
        ]
        if nproc is not None:
            wanted.append(("NPROC", nproc, nproc))
        items = []
        for name, soft, hard in wanted:
            inherited = resource.getrlimit(getattr(resource, f"RLIMIT_{name}"))[1]
            if inherited != resource.RLIM_INFINITY:
                soft, hard = min(soft, inherited), min(hard, inherited)
            items.append(f"{name}:{soft}:{hard}")
        return ",".join(items)
