"""Run untrusted Python code (a model's) in a sandboxed process.

``arun_python`` is the asyncio API (the python tool and the code reward use it); ``run_python`` is the same
call for blocking code. Each run executes ``code`` as ``main.py`` and returns a ``SandboxResult``;
``protections()`` says what this machine's sandbox enforces, and every result carries what its run had.

Every run, whatever the machine, has:

- a fresh interpreter, ``python -I -S``: no ``PYTHON*`` variables, no site-packages (standard library only);
- a fresh temporary directory as working directory, ``HOME`` and ``TMPDIR``, removed afterwards, and an
  environment of only ``PATH``, ``LANG``, ``HOME`` and ``TMPDIR``: no inherited secrets;
- limits applied before the code starts: address space (``memory_mb``, per process), CPU seconds, size of a
  written file, no core dumps; ``max_output_bytes`` of each of stdout and stderr kept;
- a wall-clock timeout, after which the whole process tree is killed.

The rest depends on the tool that works here (``isolation="auto"`` takes the first):

- ``bwrap`` (bubblewrap): its own network (loopback only), pid, IPC and UTS namespaces; the root filesystem
  read-only, empty read-only /tmp, /var/tmp, /home, /root, /run, /mnt, /media and /srv, and the working
  directory a small tmpfs. As root, bwrap builds the namespaces and the code runs as a fresh unprivileged
  uid leased for the run, so ``RLIMIT_NPROC`` (``max_processes``) holds (the kernel ignores it for uid 0)
  and root's files are out of reach; as any other user, in a user namespace where ``RLIMIT_NPROC`` counts
  only the sandbox's processes (Linux >= 5.14).
- ``unshare`` (util-linux): the same namespaces, but the host's filesystem, protected only by the uid.
- ``none``: the limits and a process group only.

docs/rewards.md has the full table and what is NOT protected (notably: without bwrap, a root rllm whose
interpreter lives under /root runs the code as root).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import fcntl
import logging
import math
import os
import platform
import random
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, TypeVar

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

ISOLATIONS = ("auto", "bwrap", "unshare", "none")

_SCRIPT_NAME = "main.py"
_MiB = 1024 * 1024
_MIN_FILE_SIZE_BYTES = 16 * _MiB
_SHM_BYTES = 16 * _MiB
_HIDDEN_DIRS = ("/tmp", "/var/tmp", "/home", "/root", "/run", "/mnt", "/media", "/srv")
_SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
# Leased uids: far above any real account, one per concurrent run (an flock per uid makes it exclusive
# across processes), so RLIMIT_NPROC counts exactly one run's processes.
_UID_BASE = 2_140_000_000
_UID_POOL = 4096
_PROBE_TIMEOUT_S = 20.0


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
) -> SandboxResult:
    """Run ``code`` as a script in a fresh sandboxed interpreter; the event loop runs on meanwhile.

    ``files`` are more files put next to ``main.py`` (read-only under bwrap) and ``args`` its
    ``sys.argv[1:]``. ``max_processes`` bounds the processes and threads alive at once, the program
    included, where the sandbox can enforce it (see ``protections()``). ``pass_fds`` are open file
    descriptors the program inherits under the same numbers (pipes to another run): this call takes them
    over and closes them here once the program has started, so the program holds the only copies.
    """
    if any(fd < 3 for fd in pass_fds):  # checked before anything is closed: these are ours, not the caller's
        raise ValueError(f"pass_fds must be above 2 (0-2 are the program's stdio), got {list(pass_fds)}")
    try:
        limits = _Limits(timeout_s, memory_mb, max_processes, max_output_bytes)
        plan = _PLANS.get(isolation) or await asyncio.to_thread(_plan_for, isolation)  # the first call probes
        workdir = _Workdir(code, dict(files or {}), stdin)
    except BaseException:
        _close_all(pass_fds)
        raise
    try:
        return await _execute(plan, workdir, limits, list(args), tuple(pass_fds))
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
) -> SandboxResult:
    """``arun_python`` for blocking code: blocks until the program ends or is killed."""
    return _run_blocking(
        arun_python(
            code, stdin=stdin, timeout_s=timeout_s, memory_mb=memory_mb, max_processes=max_processes,
            max_output_bytes=max_output_bytes, files=files, args=args, pass_fds=pass_fds, isolation=isolation,
        )
    )


def protections(
    isolation: str = "auto",
    *,
    timeout_s: float = 5.0,
    memory_mb: int = 512,
    max_processes: int = 16,
    max_output_bytes: int = 64_000,
) -> dict[str, str]:
    """What a run with these limits is protected by here, one line per protection (blocks: the first call
    tries the tools). Raises ``SandboxUnavailable`` when ``isolation`` names a tool that does not work."""
    return _plan_for(isolation).describe(_Limits(timeout_s, memory_mb, max_processes, max_output_bytes))


# --- limits -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Limits:
    timeout_s: float
    memory_mb: int
    max_processes: int
    max_output_bytes: int

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be positive, got {self.timeout_s}")
        if self.memory_mb < 32:
            raise ValueError(
                f"memory_mb must be at least 32 (the interpreter needs about 20 MB), got {self.memory_mb}")
        if self.max_processes < 1:
            raise ValueError(
                f"max_processes must be at least 1 (the program itself), got {self.max_processes}")
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
        memory = self.memory_mb * _MiB
        wanted = [("AS", memory, memory), ("CPU", self.cpu_s, self.cpu_s + 1),
                  ("FSIZE", self.file_bytes, self.file_bytes), ("CORE", 0, 0)]
        if nproc is not None:
            wanted.append(("NPROC", nproc, nproc))
        items = []
        for name, soft, hard in wanted:
            inherited = resource.getrlimit(getattr(resource, f"RLIMIT_{name}"))[1]
            if inherited != resource.RLIM_INFINITY:
                soft, hard = min(soft, inherited), min(hard, inherited)
            items.append(f"{name}:{soft}:{hard}")
        return ",".join(items)


# The first Python to run in the sandbox (``python -I -S -c``). It applies the limits, then forks: the child
# drops to the leased uid when given one and execs the program; the launcher stays as its parent (as root
# when the uid was dropped, out of the program's reach), reaps it (and, as pid 1 under unshare, every
# orphan) and reports the exact wait status and CPU time on a pipe the program does not have. Nothing of
# the model's runs before the limits are in place.
_LAUNCHER = """\
import os, resource, sys
limits, uid, report, argv = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
for item in limits.split(","):
    name, soft, hard = item.split(":")
    resource.setrlimit(getattr(resource, "RLIMIT_" + name), (int(soft), int(hard)))
child = os.fork()
if child == 0:
    os.close(report)
    if uid >= 0:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    os.execv(sys.executable, [sys.executable, "-I", "-S", *argv])
while True:
    pid, status, usage = os.wait4(-1, 0)
    if pid == child:
        os.write(report, f"{status} {usage.ru_utime + usage.ru_stime}".encode())
        os._exit(0)
"""


# --- plans: which tool, which user ----------------------------------------------------------------------


@dataclass(frozen=True)
class _Plan:
    """How runs are isolated here: ``tool`` wraps the launcher; ``drop_uid`` (root only) makes the code
    run as a uid leased for the run."""

    tool: str
    drop_uid: bool

    @property
    def _user_namespace(self) -> bool:
        return os.geteuid() != 0 and self.tool != "none"

    def nproc(self, limits: _Limits) -> int | None:
        """``RLIMIT_NPROC`` for the code, or None where it would not hold or would count other processes."""
        if self.drop_uid:
            return limits.max_processes  # the leased uid has no other process (the launcher stays root)
        if self._user_namespace and _kernel_at_least(5, 14):
            return limits.max_processes + 2  # counted per user namespace, which also holds init and launcher
        return None

    def argv(
        self, workdir: _Workdir, limits: _Limits, uid: int | None, report_fd: int, args: list[str]
    ) -> list[str]:
        if self.tool == "bwrap":
            prefix = _bwrap_args(workdir, limits, self.drop_uid)
        elif self.tool == "unshare":
            prefix = ["unshare", "--ipc", "--net", "--pid", "--uts", "--fork", "--kill-child", "--mount-proc"]
            if os.geteuid() != 0:
                prefix += ["--user", "--map-root-user"]
            prefix.append("--")
        else:
            prefix = []
        launcher = ["-I", "-S", "-c", _LAUNCHER, limits.rlimits(self.nproc(limits)),
                    str(-1 if uid is None else uid), str(report_fd)]
        return [*prefix, os.path.realpath(sys.executable), *launcher, _SCRIPT_NAME, *args]

    def describe(self, limits: _Limits) -> dict[str, str]:
        root = os.geteuid() == 0
        namespaced = self.tool != "none"
        if self.drop_uid:
            user = "a fresh unprivileged uid leased for the run, no capabilities"
        elif root and self.tool == "bwrap":
            user = "root without capabilities: no leased uid worked (are uids 2140000000+ mapped here?)"
        elif root:
            user = "root: no unprivileged uid can run this interpreter (install bubblewrap)"
        else:
            user = "this user" + (" (in its own user namespace)" if namespaced else "")
        if self.tool == "bwrap":
            filesystem = (
                f"read-only root; empty read-only {', '.join(_hidden_dirs())}; writable: the work dir "
                f"({limits.workdir_bytes // _MiB} MiB tmpfs) and /dev/shm ({_SHM_BYTES // _MiB} MiB)"
            )
        else:
            filesystem = "the host's, limited only by the code's uid (see user)"
        nproc = self.nproc(limits)
        if nproc is not None:
            process_count = f"RLIMIT_NPROC {nproc} (processes and threads)"
        elif root:
            process_count = "none: RLIMIT_NPROC does not bind root; only the timeout stops a fork bomb"
        else:
            process_count = "none: RLIMIT_NPROC would count all of this user's processes; only the timeout"
        tree = "own pid namespace: everything dies with the sandbox" if namespaced else "process group"
        network = "none: own network namespace, loopback only" if namespaced else "the host's (NOT isolated)"
        if self.drop_uid and not namespaced:
            tree += ", then every process of the leased uid"
        return {
            "isolation": self.tool,
            "user": user,
            "filesystem": filesystem,
            "network": network,
            "process_tree": tree,
            "process_count": process_count,
            "environment": "cleared: only PATH, LANG, HOME and TMPDIR (the work dir)",
            "memory": f"RLIMIT_AS {limits.memory_mb} MiB per process",
            "cpu_time": f"RLIMIT_CPU {limits.cpu_s} s per process",
            "wall_time": f"{limits.timeout_s:g} s, then the whole process tree is killed",
            "file_size": f"RLIMIT_FSIZE {limits.file_bytes // _MiB} MiB",
            "output": f"{limits.max_output_bytes} bytes kept per stream",
        }


_PLANS: dict[str, _Plan] = {}
_PLANS_LOCK = threading.Lock()


def _plan_for(isolation: str) -> _Plan:
    if isolation not in ISOLATIONS:
        raise ValueError(f"isolation must be one of {', '.join(ISOLATIONS)}, got {isolation!r}")
    with _PLANS_LOCK:
        if isolation not in _PLANS:
            _PLANS[isolation] = _choose_plan(isolation)
        return _PLANS[isolation]


def _choose_plan(isolation: str) -> _Plan:
    """The first plan that runs a probe correctly: strongest tool first, and as root a leased uid first."""
    tools = ("bwrap", "unshare", "none") if isolation == "auto" else (isolation,)
    drops = (True, False) if os.geteuid() == 0 else (False,)
    failures = []
    for tool in tools:
        if tool != "none" and shutil.which(tool) is None:
            failures.append(f"{tool}: not installed")
            continue
        for drop in drops:
            plan = _Plan(tool, drop)
            problem = _probe(plan)
            if problem is None:
                if failures or (os.geteuid() == 0 and not drop):
                    user = plan.describe(_Limits(5, 512, 16, 1))["user"]
                    reasons = "; ".join(failures) or "no leased uid"
                    logger.warning("sandbox: using %s (%s); %s", tool, user, reasons)
                return plan
            failures.append(f"{tool}{' with a leased uid' if drop else ''}: {problem}")
    raise SandboxUnavailable(
        f"no sandbox for isolation={isolation!r}: {'; '.join(failures)}. Install bubblewrap "
        "(apt-get install bubblewrap) and allow unprivileged user namespaces, or use isolation='auto'"
    )


def _probe(plan: _Plan) -> str | None:
    """None when ``plan`` runs a program as intended, else what went wrong."""
    workdir = _Workdir("import os\nprint(os.getuid())\n", {}, "")
    try:
        result = _run_blocking(_execute(plan, workdir, _Limits(_PROBE_TIMEOUT_S, 256, 4, 4096), [], ()))
    except (OSError, SandboxUnavailable) as e:
        return str(e)
    finally:
        workdir.close()
    if result.exit_code != 0 or not result.stdout.strip().isdigit():
        return (result.stderr.strip().splitlines() or [f"exit code {result.exit_code}"])[-1]
    uid = int(result.stdout)
    if plan.drop_uid and uid < _UID_BASE:  # never trust a drop that did not happen
        return f"the code ran as uid {uid}, not as a leased uid"
    return None


def _kernel_at_least(major: int, minor: int) -> bool:
    try:
        found = tuple(int(part) for part in platform.release().split("-")[0].split(".")[:2])
    except ValueError:
        return False
    return found >= (major, minor)


# --- bubblewrap ---------------------------------------------------------------------------------------


def _hidden_dirs() -> list[str]:
    return [d for d in _HIDDEN_DIRS if os.path.isdir(d) and not os.path.islink(d)]


def _bwrap_args(workdir: _Workdir, limits: _Limits, drop_uid: bool) -> list[str]:
    args = ["bwrap", "--die-with-parent", "--new-session", "--clearenv",
            "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
    if os.geteuid() == 0:
        # Root's bwrap builds the namespaces itself; only the launcher gets the capabilities it needs to
        # switch to the leased uid, and loses them (and every other one) when it does.
        if drop_uid:
            args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        args += ["--unshare-user", "--disable-userns", "--uid", "65534", "--gid", "65534"]
    args += ["--hostname", "sandbox"]
    for key, value in workdir.env().items():
        args += ["--setenv", key, value]
    args += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    hidden = _hidden_dirs()
    for path in hidden:
        args += ["--tmpfs", path]
    for path in _interpreter_dirs():
        args += [*_parents_in(path, hidden), "--ro-bind", path, path]
    args += ["--size", str(_SHM_BYTES), "--perms", "1777", "--tmpfs", "/dev/shm"]
    args += [*_parents_in(workdir.path, hidden), "--size", str(limits.workdir_bytes), "--perms", "0777",
             "--tmpfs", workdir.path]
    for name in workdir.names:
        path = os.path.join(workdir.path, name)
        args += ["--ro-bind", path, path]
    for path in [*hidden, "/dev"]:
        args += ["--remount-ro", path]
    return [*args, "--chdir", workdir.path, "--"]


def _interpreter_dirs() -> list[str]:
    """What the interpreter needs to start: its prefixes, its directory and its venv (``pyvenv.cfg``)."""
    exe = os.path.realpath(sys.executable)
    dirs = {os.path.realpath(sys.base_prefix), os.path.realpath(sys.base_exec_prefix), os.path.dirname(exe)}
    venv = os.path.dirname(os.path.dirname(exe))
    if os.path.exists(os.path.join(venv, "pyvenv.cfg")):
        dirs.add(venv)
    return sorted(d for d in dirs if not any(other != d and _is_under(d, other) for other in dirs))


def _parents_in(path: str, hidden: list[str]) -> list[str]:
    """bwrap arguments creating, world-traversable, the directories between a hidden dir and ``path`` (bwrap
    would create them 0700, which the leased uid cannot enter)."""
    top = next((d for d in hidden if _is_under(path, d) and path != d), None)
    if top is None:
        return []
    args, current = [], top
    for part in os.path.relpath(os.path.dirname(path), top).split(os.sep):
        if part != ".":
            current = os.path.join(current, part)
            args += ["--perms", "0755", "--dir", current]
    return args


def _is_under(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip(os.sep) + os.sep)


# --- one run ------------------------------------------------------------------------------------------


class _Workdir:
    """The files of one run: a private host directory holding ``main.py`` and the extra files, and unnamed
    stdin/stdout/stderr files (no pipe to fill, nothing to deadlock)."""

    def __init__(self, code: str, files: dict[str, str], stdin: str) -> None:
        for name in files:
            if not name or name in (".", "..", _SCRIPT_NAME) or os.sep in name:
                raise ValueError(f"files: {name!r} is not a plain file name other than {_SCRIPT_NAME}")
        self.path = tempfile.mkdtemp(prefix="rllm-sandbox-")
        self.names = [_SCRIPT_NAME, *files]
        self._files = contextlib.ExitStack()
        try:
            for name, text in {_SCRIPT_NAME: code, **files}.items():
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


async def _execute(
    plan: _Plan, workdir: _Workdir, limits: _Limits, args: list[str], pass_fds: tuple[int, ...]
) -> SandboxResult:
    start = time.perf_counter()
    report_r, report_w = os.pipe()
    os.set_blocking(report_r, False)
    lease = None
    try:
        try:
            lease = _UidLease.take(sweep=plan.tool == "none") if plan.drop_uid else None
            if lease is not None and plan.tool != "bwrap":
                os.chown(workdir.path, lease.uid, lease.uid)  # under bwrap the work dir is a fresh tmpfs
            # Popen, not asyncio's subprocess: its fork/exec blocks as briefly, and owning the wait lets
            # the group be killed before the leader is reaped.
            proc = subprocess.Popen(  # noqa: ASYNC220
                plan.argv(workdir, limits, None if lease is None else lease.uid, report_w, args),
                stdin=workdir.stdin if workdir.stdin is not None else subprocess.DEVNULL,
                stdout=workdir.stdout, stderr=workdir.stderr, cwd=workdir.path,
                env=workdir.env(), start_new_session=True, pass_fds=(report_w, *pass_fds),
            )
        finally:
            _close_all((report_w, *pass_fds))
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
        stdout=stdout, stderr=stderr, exit_code=exit_code, timed_out=timed_out,
        memory_exceeded=exit_code != 0 and "MemoryError" in stderr, duration_s=time.perf_counter() - start,
        cpu_s=cpu_s, killed_reason=_killed_reason(exit_code, timed_out, cpu_s, limits),
        protections=plan.describe(limits),
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


def _killed_reason(exit_code: int, timed_out: bool, cpu_s: float | None, limits: _Limits) -> str | None:
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


def _close_all(fds: Sequence[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _run_blocking(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coro`` to the end from blocking code: in a private event loop, in a thread of its own when
    this thread already runs a loop (which cannot be re-entered)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


# --- leased uids (root only) --------------------------------------------------------------------------


class _UidLease:
    """A uid no other run uses now, in any process: held through an flock on a file named after it."""

    def __init__(self, uid: int, fd: int) -> None:
        self.uid, self._fd = uid, fd

    @classmethod
    def take(cls, *, sweep: bool) -> _UidLease:
        directory = os.path.join(tempfile.gettempdir(), "rllm-sandbox-uids")
        os.makedirs(directory, mode=0o700, exist_ok=True)
        info = os.lstat(directory)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != 0 or info.st_mode & 0o077:
            raise SandboxUnavailable(f"{directory} must be a directory owned by root with mode 0700")
        start = random.randrange(_UID_POOL)
        for i in range(_UID_POOL):
            uid = _UID_BASE + (start + i) % _UID_POOL
            fd = os.open(os.path.join(directory, str(uid)), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            if sweep:  # a crashed earlier holder may have left processes behind
                _kill_uid(uid)
            return cls(uid, fd)
        raise SandboxUnavailable(f"all {_UID_POOL} sandbox uids are in use")

    def release(self) -> None:
        try:
            _kill_uid(self.uid)
        finally:
            os.close(self._fd)


def _kill_uid(uid: int, wait_s: float = 2.0) -> None:
    """SIGKILL every process whose real, effective or saved uid is ``uid``, until none is left.

    Only ever a leased uid. Each process is signalled through a pidfd opened before its uid is checked,
    so a pid reused in between cannot be hit (never ``kill(-1)``: as root that kills everything).
    """
    if uid < _UID_BASE:
        raise ValueError(f"refusing to kill the processes of uid {uid}: not a leased sandbox uid")
    if not hasattr(os, "pidfd_open") or not hasattr(signal, "pidfd_send_signal"):
        return
    deadline = time.monotonic() + wait_s
    while True:
        found = False
        for name in os.listdir("/proc"):
            if not name.isdigit() or not _owned_by(name, uid):
                continue
            try:
                pidfd = os.pidfd_open(int(name))
            except OSError:
                continue  # gone
            try:
                if _owned_by(name, uid):  # the pidfd now pins the process we check
                    found = True
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            except OSError:
                pass
            finally:
                os.close(pidfd)
        if not found or time.monotonic() > deadline:
            return
        time.sleep(0.01)


def _owned_by(pid: str, uid: int) -> bool:
    """Whether live (not zombie) process ``pid`` has ``uid`` as its real, effective or saved uid."""
    try:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
    except OSError:
        return False
    if fields.get("State", "").strip().startswith("Z"):
        return False
    return str(uid) in fields.get("Uid", "").split()[:3]
