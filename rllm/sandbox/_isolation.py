"""Which tool isolates runs here (bwrap, unshare or none) and as which user: found once per isolation by
running a probe, kept as a ``Plan`` that builds each run's command line and describes its protections."""

from __future__ import annotations

import logging
import os
import platform
import shutil
import sys
import threading
from dataclasses import dataclass

from rllm.sandbox._bwrap import allowed_dirs, bwrap_args, masked_dirs
from rllm.sandbox._packages import SITE_DIR, Package, bind_args, search_path
from rllm.sandbox._packages import describe as describe_packages
from rllm.sandbox._run import Workdir, execute, run_blocking
from rllm.sandbox._types import SCRIPT_NAME, SHM_BYTES, Limits, MiB, SandboxUnavailable
from rllm.sandbox._uids import UID_BASE

logger = logging.getLogger("rllm.sandbox")  # the package's logger, as users configure it

ISOLATIONS = ("auto", "bwrap", "unshare", "none")
# Names the isolation ``auto`` uses instead of bubblewrap: the knowing opt-in to weaker isolation.
OPT_IN_ENV = "RLLM_SANDBOX_ISOLATION"

_PROBE_TIMEOUT_S = 20.0

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

# With allowed packages the program runs through this bootstrap (``python -I -S -c``; -I ignores
# PYTHONPATH and -S reads no .pth file): it appends the packages' directories to sys.path, keeps a BLAS
# from starting a thread per core against ``max_processes`` and ``memory_mb``, then runs main.py as a script
# would run, in ``__main__``, its tracebacks without this frame.
_BOOTSTRAP = """\
import os, sys
sys.path.extend(sys.argv[1].split(os.pathsep))
del sys.argv[:2]
for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")
__file__, __cached__ = os.path.abspath(sys.argv[0]), None
sys.excepthook = lambda kind, value, tb, hook=sys.excepthook: hook(
    kind, value.with_traceback(tb and tb.tb_next), tb and tb.tb_next)
del os, sys, _name
exec(compile(open(__file__, "rb").read(), __file__, "exec", dont_inherit=True))
"""


@dataclass(frozen=True)
class Plan:
    """How runs are isolated here: ``tool`` wraps the launcher; ``drop_uid`` (root only) makes the code
    run as a uid leased for the run."""

    tool: str
    drop_uid: bool

    @property
    def _user_namespace(self) -> bool:
        return os.geteuid() != 0 and self.tool != "none"

    def nproc(self, limits: Limits) -> int | None:
        """``RLIMIT_NPROC`` for the code, or None where it would not hold or would count other processes."""
        if self.drop_uid:
            return limits.max_processes  # the leased uid has no other process (the launcher stays root)
        if self._user_namespace and _kernel_at_least(5, 14):
            return limits.max_processes + 2  # counted per user namespace, which also holds init and launcher
        return None

    def argv(
        self,
        workdir: Workdir,
        limits: Limits,
        uid: int | None,
        report_fd: int,
        args: list[str],
        packages: tuple[Package, ...] = (),
    ) -> list[str]:
        bound = self.tool == "bwrap"
        if bound:
            prefix = bwrap_args(workdir, limits, self.drop_uid, bind_args(packages))
        elif self.tool == "unshare":
            prefix = ["unshare", "--ipc", "--net", "--pid", "--uts", "--fork", "--kill-child", "--mount-proc"]
            if os.geteuid() != 0:
                prefix += ["--user", "--map-root-user"]
            prefix.append("--")
        else:
            prefix = []
        launcher = [
            "-I",
            "-S",
            "-c",
            _LAUNCHER,
            limits.rlimits(self.nproc(limits)),
            str(-1 if uid is None else uid),
            str(report_fd),
        ]
        program = [SCRIPT_NAME, *args]
        if packages:
            program = ["-c", _BOOTSTRAP, os.pathsep.join(search_path(packages, bound)), *program]
        return [*prefix, os.path.realpath(sys.executable), *launcher, *program]

    def describe(self, limits: Limits, packages: tuple[Package, ...] = ()) -> dict[str, str]:
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
            masks = ", ".join(masked_dirs()) or "none needed"
            filesystem = (
                f"allow-list, read-only: {', '.join(allowed_dirs())} and the linker's /etc files, "
                f"site-packages and secret dirs inside them masked ({masks})"
                f"{f', the allowed packages alone bound at {SITE_DIR}' if packages else ''}; nothing else of the host "
                f"(no project, venv, HOME, caches, datasets, runs, /tmp); writable: the work dir "
                f"({limits.workdir_bytes // MiB} MiB tmpfs) and /dev/shm ({SHM_BYTES // MiB} MiB)"
            )
        else:
            filesystem = (
                "the host's, ALL readable by the code's uid (see user): the project, its datasets "
                "and the expected answers included"
            )
        nproc = self.nproc(limits)
        if nproc is not None:
            process_count = f"RLIMIT_NPROC {nproc} (processes and threads)"
        elif root:
            process_count = "none: RLIMIT_NPROC does not bind root; only the timeout stops a fork bomb"
        else:
            process_count = "none: RLIMIT_NPROC would count all of this user's processes; only the timeout"
        if namespaced:
            tree = "own pid namespace: everything dies with the sandbox"
        elif self.drop_uid:
            tree = "process group, then every process of the leased uid (setsid children included)"
        else:
            tree = (
                "process group only: a child that calls setsid() leaves it and OUTLIVES the timeout "
                "(nothing else can find it; use bwrap)"
            )
        network = "none: own network namespace, loopback only" if namespaced else "the host's (NOT isolated)"
        return {
            "isolation": self.tool,
            "user": user,
            "filesystem": filesystem,
            "network": network,
            "process_tree": tree,
            "process_count": process_count,
            "packages": describe_packages(packages, self.tool == "bwrap"),
            "environment": "cleared: only PATH, LANG, HOME and TMPDIR (the work dir)"
            + ("; OMP, OPENBLAS and MKL_NUM_THREADS=1 (set before the program)" if packages else ""),
            "memory": f"RLIMIT_AS {limits.memory_mb} MiB per process",
            "cpu_time": f"RLIMIT_CPU {limits.cpu_s} s per process",
            "wall_time": f"{limits.timeout_s:g} s, then the whole process tree is killed",
            "file_size": f"RLIMIT_FSIZE {limits.file_bytes // MiB} MiB",
            "output": f"{limits.max_output_bytes} bytes kept per stream",
        }


_PLANS: dict[str, Plan] = {}
_PLANS_LOCK = threading.Lock()


def cached_plan(isolation: str) -> Plan | None:
    """The plan for ``isolation`` if it was already found (never blocks)."""
    return _PLANS.get(_resolve(isolation))


def plan_for(isolation: str) -> Plan:
    """The plan for ``isolation``; the first call per isolation blocks while it tries the tools. Raises
    ``SandboxUnavailable`` (what to install, or how to opt in to less) when it does not work here."""
    tool = _resolve(isolation)
    with _PLANS_LOCK:
        if tool not in _PLANS:
            _PLANS[tool] = _choose_plan(tool)
        return _PLANS[tool]


def _resolve(isolation: str) -> str:
    """The tool ``isolation`` stands for: ``auto`` is bubblewrap unless ``$RLLM_SANDBOX_ISOLATION`` names
    another, knowingly."""
    if isolation not in ISOLATIONS:
        raise ValueError(f"isolation must be one of {', '.join(ISOLATIONS)}, got {isolation!r}")
    if isolation != "auto":
        return isolation
    value = os.environ.get(OPT_IN_ENV, "").strip() or "auto"
    if value not in ISOLATIONS:
        raise ValueError(f"{OPT_IN_ENV}={value!r}: choose one of {', '.join(ISOLATIONS)}")
    return "bwrap" if value == "auto" else value


def _choose_plan(tool: str) -> Plan:
    """The plan of ``tool`` that runs a probe correctly, as root with a leased uid first."""
    drops = (True, False) if os.geteuid() == 0 else (False,)
    failures = []
    if tool != "none" and shutil.which(tool) is None:
        failures.append(f"{tool}: not installed")
    else:
        for drop in drops:
            plan = Plan(tool, drop)
            problem = _probe(plan)
            if problem is None:
                if os.geteuid() == 0 and not drop:
                    user = plan.describe(Limits(5, 512, 16, 1))["user"]
                    logger.warning("sandbox: using %s as %s (%s)", tool, user, "; ".join(failures))
                return plan
            failures.append(f"{tool}{' with a leased uid' if drop else ''}: {problem}")
    if tool == "bwrap":
        raise SandboxUnavailable(
            f"no real isolation for model-written code here ({'; '.join(failures)}): install bubblewrap "
            f"(apt-get install bubblewrap, or bash scripts/setup.sh as root) and allow user namespaces, or set "
            f"{OPT_IN_ENV}=none (or pass isolation='none') to run it with the host's filesystem, knowingly"
        )
    raise SandboxUnavailable(f"no sandbox for isolation={tool!r}: {'; '.join(failures)}")


def _probe(plan: Plan) -> str | None:
    """None when ``plan`` runs a program as intended, else what went wrong."""
    workdir = Workdir("import os\nprint(os.getuid())\n", {}, "")
    try:
        result = run_blocking(execute(plan, workdir, Limits(_PROBE_TIMEOUT_S, 256, 4, 4096), [], ()))
    except (OSError, SandboxUnavailable) as e:
        return str(e)
    finally:
        workdir.close()
    if result.exit_code != 0 or not result.stdout.strip().isdigit():
        return (result.stderr.strip().splitlines() or [f"exit code {result.exit_code}"])[-1]
    uid = int(result.stdout)
    if plan.drop_uid and uid < UID_BASE:  # never trust a drop that did not happen
        return f"the code ran as uid {uid}, not as a leased uid"
    return None


def _kernel_at_least(major: int, minor: int) -> bool:
    try:
        found = tuple(int(part) for part in platform.release().split("-")[0].split(".")[:2])
    except ValueError:
        return False
    return found >= (major, minor)
