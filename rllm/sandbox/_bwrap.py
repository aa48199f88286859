"""The bubblewrap command line of a run: namespaces, a read-only root, hidden directories, a tmpfs work dir."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from rllm.sandbox._types import SHM_BYTES, Limits

if TYPE_CHECKING:
    from rllm.sandbox._run import Workdir

_HIDDEN_DIRS = ("/tmp", "/var/tmp", "/home", "/root", "/run", "/mnt", "/media", "/srv")


def hidden_dirs() -> list[str]:
    """The directories bwrap replaces with an empty read-only tmpfs on this machine."""
    return [d for d in _HIDDEN_DIRS if os.path.isdir(d) and not os.path.islink(d)]


def bwrap_args(workdir: Workdir, limits: Limits, drop_uid: bool) -> list[str]:
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
    hidden = hidden_dirs()
    for path in hidden:
        args += ["--tmpfs", path]
    for path in _interpreter_dirs():
        args += [*_parents_in(path, hidden), "--ro-bind", path, path]
    args += ["--size", str(SHM_BYTES), "--perms", "1777", "--tmpfs", "/dev/shm"]
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
