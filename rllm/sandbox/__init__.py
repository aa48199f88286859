"""Run untrusted Python code (a model's) in a sandboxed process.

``arun_python`` is the asyncio API (the python tool and the code reward use it); ``run_python`` is the same
call for blocking code. Each run executes ``code`` as ``main.py`` and returns a ``SandboxResult``;
``protections()`` says what this machine's sandbox enforces, and every result carries what its run had.
``run_blocking`` runs a coroutine of such calls (several runs at once) to its end from blocking code.

Every run, whatever the machine, has:

- a fresh interpreter, ``python -I -S``: no ``PYTHON*`` variables, no site-packages: the standard library,
  plus only the ``packages`` the caller names (below);
- a fresh temporary directory as working directory, ``HOME`` and ``TMPDIR``, removed afterwards, and an
  environment of only ``PATH``, ``LANG``, ``HOME`` and ``TMPDIR``: no inherited secrets;
- limits applied before the code starts: address space (``memory_mb``, per process), CPU seconds, size of a
  written file, no core dumps; ``max_output_bytes`` of each of stdout and stderr kept;
- a wall-clock timeout, after which the whole process tree is killed.

The rest depends on the tool. ``isolation="auto"`` is bubblewrap or nothing: where bwrap is missing or does
not work it raises ``SandboxUnavailable`` (install bubblewrap, or opt out knowingly with ``isolation="none"``
or ``$RLLM_SANDBOX_ISOLATION=none``); it never falls back silently.

- ``bwrap`` (bubblewrap): its own network (loopback only), pid, IPC and UTS namespaces; a filesystem built
  from an allow-list on an empty read-only root: ``/usr`` (and the ``/bin``, ``/lib*`` links), the linker's
  ``/etc`` files and the interpreter's prefix, read-only, with their site-packages and any secret directory
  inside them masked; nothing of the project, the venv, HOME, caches, datasets or runs. Writable: the work
  dir (a small tmpfs) and /dev/shm. As root, bwrap builds the namespaces and the code runs as a fresh
  unprivileged uid leased for the run, so ``RLIMIT_NPROC`` (``max_processes``) holds (the kernel ignores it
  for uid 0); as any other user, in a user namespace where ``RLIMIT_NPROC`` counts only the sandbox's
  processes (Linux >= 5.14).
- ``unshare`` (util-linux), only when named: the same namespaces, but the host's filesystem, all readable.
- ``none``, only when named: the limits and a process group; a child that calls ``setsid()`` outlives the
  timeout unless a leased uid (root) lets every process of that uid be killed.

``packages=("numpy",)`` lets named top-level packages in: each is found in this (the host) interpreter
without importing it, and must be a regular install in a site-packages directory; ``rllm``, a name not
installed, a standard-library module, or an editable install / ``sys.path`` entry into a project is refused
with ``PackageNotAllowed`` (one line). Under bwrap only the package's directory and its wheel's companions
(``numpy.libs``, its ``.dist-info``) are bound, read-only, at ``/opt/rllm-sandbox-site``, which the program's
``sys.path`` ends with; the rest of site-packages stays hidden. Dependencies are NOT followed: a package that
imports another needs both named. Under ``unshare`` and ``none`` the packages come from the host's
site-packages as they are (that directory goes on ``sys.path``, every other package in it with it).

docs/rewards.md has the full table and what is NOT protected.

Inside: ``_types`` (the result, the limits), ``_isolation`` (finding the tool, the protections report),
``_bwrap`` (its command line), ``_packages`` (the allowed packages), ``_uids`` (the leased uids), ``_run``
(one run, start to result).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from rllm.sandbox._isolation import ISOLATIONS, cached_plan, plan_for
from rllm.sandbox._packages import PackageNotAllowed, cached_packages, normalize, resolve_packages
from rllm.sandbox._run import Workdir, close_all, execute, run_blocking
from rllm.sandbox._types import Limits, SandboxResult, SandboxUnavailable

__all__ = [
    "ISOLATIONS",
    "PackageNotAllowed",
    "SandboxResult",
    "SandboxUnavailable",
    "arun_python",
    "protections",
    "run_blocking",
    "run_python",
]


async def arun_python(
    code: str,
    *,
    stdin: str = "",
    timeout_s: float = 5.0,
    memory_mb: int = 512,
    max_processes: int = 16,
    max_output_bytes: int = 64_000,
    files: Mapping[str, str] | None = None,
    args: Sequence[str] = (),
    pass_fds: Sequence[int] = (),
    isolation: str = "auto",
    packages: Sequence[str] = (),
) -> SandboxResult:
    """Run ``code`` as a script in a fresh sandboxed interpreter; the event loop runs on meanwhile.

    ``files`` are more files put next to ``main.py`` (read-only under bwrap) and ``args`` its
    ``sys.argv[1:]``. ``max_processes`` bounds the processes and threads alive at once, the program
    included, where the sandbox can enforce it (see ``protections()``). ``pass_fds`` are open file
    descriptors the program inherits under the same numbers (pipes to another run): this call takes them
    over and closes them here once the program has started, so the program holds the only copies.
    ``packages`` are the top-level packages it may import besides the standard library, each named
    (dependencies are not followed); ``PackageNotAllowed`` for one that cannot be let in (see above).
    """
    if any(fd < 3 for fd in pass_fds):  # checked before anything is closed: these are ours, not the caller's
        raise ValueError(f"pass_fds must be above 2 (0-2 are the program's stdio), got {list(pass_fds)}")
    try:
        limits = Limits(timeout_s, memory_mb, max_processes, max_output_bytes)
        plan = cached_plan(isolation) or await asyncio.to_thread(plan_for, isolation)  # the first call probes
        names = normalize(packages)
        allowed = cached_packages(names)
        if allowed is None:  # the first call per tuple of names reads the distributions' records
            allowed = await asyncio.to_thread(resolve_packages, names)
        workdir = Workdir(code, dict(files or {}), stdin)
    except BaseException:
        close_all(pass_fds)
        raise
    try:
        return await execute(plan, workdir, limits, list(args), tuple(pass_fds), allowed)
    finally:
        await asyncio.to_thread(workdir.close)


def run_python(
    code: str,
    *,
    stdin: str = "",
    timeout_s: float = 5.0,
    memory_mb: int = 512,
    max_processes: int = 16,
    max_output_bytes: int = 64_000,
    files: Mapping[str, str] | None = None,
    args: Sequence[str] = (),
    pass_fds: Sequence[int] = (),
    isolation: str = "auto",
    packages: Sequence[str] = (),
) -> SandboxResult:
    """``arun_python`` for blocking code: blocks until the program ends or is killed."""
    return run_blocking(
        arun_python(
            code,
            stdin=stdin,
            timeout_s=timeout_s,
            memory_mb=memory_mb,
            max_processes=max_processes,
            max_output_bytes=max_output_bytes,
            files=files,
            args=args,
            pass_fds=pass_fds,
            isolation=isolation,
            packages=packages,
        )
    )


def protections(
    isolation: str = "auto",
    *,
    timeout_s: float = 5.0,
    memory_mb: int = 512,
    max_processes: int = 16,
    max_output_bytes: int = 64_000,
    packages: Sequence[str] = (),
) -> dict[str, str]:
    """What a run with these limits and ``packages`` is protected by here, one line per protection (blocks:
    the first call tries the tools). Raises ``SandboxUnavailable`` when ``isolation`` names a tool that does
    not work, ``PackageNotAllowed`` when a package cannot be let in."""
    plan = plan_for(isolation)
    allowed = resolve_packages(normalize(packages))
    return plan.describe(Limits(timeout_s, memory_mb, max_processes, max_output_bytes), allowed)
