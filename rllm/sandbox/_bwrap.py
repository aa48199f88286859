"""The bubblewrap command line of a run: namespaces, and a filesystem built from an allow-list.

The sandbox's root is an empty read-only tmpfs. Into it go, read-only, only what the interpreter needs to
run a program: the system directories (``/usr`` and its ``/bin``, ``/lib*`` links), the few ``/etc`` files
the dynamic linker and ``time`` read, and the interpreter's own installation (``sys.base_prefix``). Every
site-packages directory inside those is covered by an empty tmpfs (the program gets the standard library
only), and so is any directory of this process that must stay secret but happens to lie inside them
(``secret_dirs``: the project, its venv, HOME, caches, datasets, the run store). Nothing else of the host
exists inside: not the repository, the venv, ``~/.cache``, ``runs/``, the dataset registry, HOME or /tmp.
"""

from __future__ import annotations

import glob
import os
import site
import sys
import sysconfig
from functools import cache
from typing import TYPE_CHECKING

from rllm.sandbox._types import SHM_BYTES, Limits

if TYPE_CHECKING:
    from rllm.sandbox._run import Workdir

# What the interpreter and the C library need from /etc: the linker's cache and config, the time zone.
_ETC_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime", "/etc/timezone")
# The system directories: /usr, and on systems without merged /usr the top-level binary and library dirs.
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Environment variables naming directories that hold data the program must never read.
_SECRET_ENV = (
    "HOME",
    "RLLM_CACHE_DIR",
    "RLLM_DATASETS_DIR",
    "RLLM_STORE",
    "XDG_CACHE_HOME",
    "XDG_DATA_HOME",
    "HF_HOME",
    "HF_DATASETS_CACHE",
    "HUGGINGFACE_HUB_CACHE",
    "TRANSFORMERS_CACHE",
    "VIRTUAL_ENV",
)


def bwrap_args(workdir: Workdir, limits: Limits, drop_uid: bool, binds: list[str]) -> list[str]:
    """The command line up to the program: namespaces, environment, the allow-list, then ``binds`` (the
    allowed packages' read-only binds), /dev, /proc, /dev/shm and the work dir."""
    args = [
        "bwrap",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        "--unshare-ipc",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-uts",
        "--unshare-cgroup-try",
    ]
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
    args += filesystem_args()
    args += binds
    args += ["--dev", "/dev", "--proc", "/proc"]
    args += ["--size", str(SHM_BYTES), "--perms", "1777", "--tmpfs", "/dev/shm"]
    args += [
        *_parents(workdir.path),
        "--size",
        str(limits.workdir_bytes),
        "--perms",
        "0777",
        "--tmpfs",
        workdir.path,
    ]
    for name in workdir.names:
        path = os.path.join(workdir.path, name)
        args += ["--ro-bind", path, path]
    args += ["--remount-ro", "/dev", "--remount-ro", "/"]
    return [*args, "--chdir", workdir.path, "--"]


@cache
def filesystem_args() -> tuple[str, ...]:
    """The bwrap arguments that fill the empty root: the allow-list, then the tmpfs masks inside it."""
    args: list[str] = ["--perms", "0755", "--tmpfs", "/"]
    for path in _SYSTEM_DIRS:
        if os.path.islink(path):  # merged /usr: /bin -> usr/bin
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for path in _ETC_FILES:
        if os.path.lexists(path):
            args += [*_parents(path), "--ro-bind", os.path.realpath(path), path]
    for path in interpreter_dirs():
        args += [*_parents(path), "--ro-bind", path, path]
    for path in masked_dirs():
        args += ["--perms", "0555", "--tmpfs", path]
    return tuple(args)


@cache
def allowed_dirs() -> tuple[str, ...]:
    """The host directories the sandbox sees (read-only), masks aside. Found once per process, as
    ``filesystem_args`` is, so what ``protections()`` reports is what every run gets."""
    dirs = [p for p in _SYSTEM_DIRS if os.path.isdir(p) and not os.path.islink(p)]
    return tuple(sorted({*dirs, *interpreter_dirs()}))


def interpreter_dirs() -> list[str]:
    """The interpreter's installation: its prefixes (standard library, ``lib-dynload``) and its binary's
    directory; never the venv (``python -I -S`` of the real binary needs none)."""
    exe = os.path.realpath(sys.executable)
    dirs = {os.path.realpath(sys.base_prefix), os.path.realpath(sys.base_exec_prefix), os.path.dirname(exe)}
    return sorted(d for d in dirs if not any(other != d and _is_under(d, other) for other in dirs))


@cache
def secret_dirs() -> tuple[str, ...]:
    """The directories of this process that the program must never read: every site-packages dir and
    ``sys.path`` entry outside the standard library (an editable install names the repository there), the
    rllm package's repository, the venv, the working directory (runs/ lives there), and the directories the
    environment names for HOME, caches, datasets and the run store."""
    stdlib = {os.path.realpath(sysconfig.get_paths()[key]) for key in ("stdlib", "platstdlib")}
    found = {*site.getsitepackages(), site.getusersitepackages(), sys.prefix, os.getcwd()}
    for scheme_key in ("purelib", "platlib"):
        found.add(
            sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_exec_prefix})[scheme_key]
        )
    for entry in sys.path:
        real = os.path.realpath(entry or ".")
        if not any(_is_under(real, s) for s in stdlib):
            found.add(real)
    package = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))  # .../rllm
    found.add(os.path.dirname(package))  # the repository (or the site-packages holding rllm)
    for name in _SECRET_ENV:
        value = os.environ.get(name)
        if value:
            path = os.path.expanduser(value)
            found.add(os.path.dirname(path) if name == "RLLM_STORE" else path)
    found.add(os.path.expanduser("~"))
    # Any interpreter's packages, not just this one's (another Python's dist-packages may hold rllm too).
    for prefix in {"/usr", "/usr/local", sys.base_prefix, sys.base_exec_prefix}:
        for kind in ("site-packages", "dist-packages"):
            found.update(glob.glob(os.path.join(prefix, "lib*", "python*", kind)))
    return tuple(sorted(os.path.realpath(p) for p in found if p))


@cache
def masked_dirs() -> tuple[str, ...]:
    """The secret directories that lie inside an allowed one, covered there by an empty tmpfs. A secret
    that contains an allowed dir (HOME holding a pyenv interpreter) needs no mask: only the allowed
    subdirectory is bound, none of its siblings. Found once per process, like ``filesystem_args``."""
    allowed = allowed_dirs()
    masks = {
        s for s in secret_dirs() if os.path.isdir(s) and any(_is_under(s, a) and s != a for a in allowed)
    }
    # A mask inside another mask is covered already.
    return tuple(sorted(m for m in masks if not any(other != m and _is_under(m, other) for other in masks)))


def _parents(path: str) -> list[str]:
    """bwrap arguments creating, world-traversable, the directories above ``path`` in the sandbox's root
    (bwrap would create them 0700, which the leased uid cannot enter)."""
    args, current = [], os.sep
    for part in os.path.dirname(path).strip(os.sep).split(os.sep):
        if part:
            current = os.path.join(current, part)
            args += ["--perms", "0755", "--dir", current]
    return args


def _is_under(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip(os.sep) + os.sep)
