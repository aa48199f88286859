"""Leased uids (root only): one fresh unprivileged uid per concurrent run, so that ``RLIMIT_NPROC`` counts
exactly one run's processes and root's files are out of reach."""

from __future__ import annotations

import fcntl
import os
import random
import signal
import stat
import tempfile
import time

from rllm.sandbox._types import SandboxUnavailable

# Far above any real account; an flock per uid makes a lease exclusive across processes.
UID_BASE = 2_140_000_000
_UID_POOL = 4096


class UidLease:
    """A uid no other run uses now, in any process: held through an flock on a file named after it."""

    def __init__(self, uid: int, fd: int) -> None:
        self.uid, self._fd = uid, fd

    @classmethod
    def take(cls, *, sweep: bool) -> UidLease:
        directory = os.path.join(tempfile.gettempdir(), "rllm-sandbox-uids")
        os.makedirs(directory, mode=0o700, exist_ok=True)
        info = os.lstat(directory)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != 0 or info.st_mode & 0o077:
            raise SandboxUnavailable(f"{directory} must be a directory owned by root with mode 0700")
        start = random.randrange(_UID_POOL)
        for i in range(_UID_POOL):
            uid = UID_BASE + (start + i) % _UID_POOL
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
    if uid < UID_BASE:
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
