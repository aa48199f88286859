"""Call a pure function under a wall-clock bound, from any thread: ``call_bounded(func, args, timeout_s)``.

For graders whose work can explode on some inputs (sympy on ``2^{2^{2^{100}}}`` or ``(10^{10})!``): the
call returns the function's result or raises ``TimeoutError`` once ``timeout_s`` has passed.

* On the main thread ``func`` runs in-process under an ``ITIMER_REAL`` alarm: the mechanism of
  math_verify's own timeouts, but for the whole call, at float resolution, and restoring any alarm the
  caller had set (math_verify's are per comparison, in whole seconds, and cancel the caller's alarm).
  CPython checks signals inside long-integer arithmetic, so even a giant ``pow`` is interrupted.
* Off the main thread signals cannot be used, and nothing in-process can stop a giant ``pow``: an
  exception injected into the thread waits for the C loop to finish, which holds the GIL and so stalls
  every other thread too. There ``func`` runs in a pool of worker processes (one pool per function,
  started on first use, kept warm, at most ``_POOL_SIZE``), each applying the same alarm itself, and
  killed if it has not answered ``_KILL_GRACE_S`` after the deadline. Worker start-up is not counted in
  ``timeout_s``; callers beyond the pool size wait for a free worker. A worker imports ``func`` by its
  ``module:qualname``, so ``func`` must be a module-level function, and its arguments and result JSON.
* ``warm_up`` (first-use imports, caches) runs before any deadline: in-process before each main-thread
  call (make it cheap to repeat, e.g. ``functools.cache``), and once in each worker before it serves.
"""

from __future__ import annotations

import atexit
import functools
import importlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

_T = TypeVar("_T")

_KILL_GRACE_S = 0.5
_STARTUP_TIMEOUT_S = 60.0
_POOL_SIZE = max(1, min(8, os.cpu_count() or 1))
_SERVE = "from rllm.rewards._bounded import _serve_worker; _serve_worker()"
_PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])


class WorkerFailed(RuntimeError):
    """A worker process could not start, died, answered garbage, or the function raised in it."""


def call_bounded(
    func: Callable[..., _T],
    args: Sequence[Any],
    timeout_s: float,
    *,
    warm_up: Callable[[], object] | None = None,
) -> _T:
    """``func(*args)``, or ``TimeoutError`` once ``timeout_s`` has passed (see the module docstring for how,
    on the main thread and off it). ``WorkerFailed`` when a worker process fails, off the main thread."""
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s}")
    name = _name_of(func)
    warm_name = None if warm_up is None else _name_of(warm_up)
    if threading.current_thread() is threading.main_thread():
        if warm_up is not None:
            warm_up()
        try:
            return _with_alarm(functools.partial(func, *args), timeout_s)
        except _NoAlarm:  # signals unavailable here after all (a subinterpreter): use a worker process
            pass
    return _get_pool(name, warm_name).call(list(args), timeout_s)


def _name_of(func: Callable[..., Any]) -> str:
    """``module:qualname`` of a module-level function, which a worker process can import."""
    name = f"{func.__module__}:{func.__qualname__}"
    try:
        found = _resolve(name)
    except (ImportError, AttributeError):
        found = None
    if found is not func:
        raise ValueError(f"{func!r} is not importable as {name}: pass a module-level function")
    return name


def _resolve(name: str) -> Any:
    module, _, attr = name.partition(":")
    found: Any = importlib.import_module(module)
    for part in attr.split("."):
        found = getattr(found, part)
    return found


# --- In-process: the alarm --------------------------------------------------------------------------


class _Deadline(BaseException):
    """Raised into the function when its time is up; a BaseException so that no ``except Exception`` in
    sympy swallows it."""


class _NoAlarm(Exception):
    """This thread cannot take signals (not the main thread of the main interpreter)."""


def _with_alarm(call: Callable[[], _T], timeout_s: float) -> _T:
    """``call()``, or ``TimeoutError`` once ``timeout_s`` has passed. Main thread only (else ``_NoAlarm``)."""
    armed = True

    def on_alarm(signum: int, frame: Any) -> None:
        if armed:
            raise _Deadline

    try:
        old_handler = signal.signal(signal.SIGALRM, on_alarm)
    except ValueError as error:
        raise _NoAlarm from error
    start = time.monotonic()
    # The alarm repeats every 50 ms after the deadline, in case library code catches the first one.
    old_delay, old_interval = signal.setitimer(signal.ITIMER_REAL, timeout_s, 0.05)
    try:
        try:
            return call()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            armed = False  # a signal already on its way is now a no-op
    except _Deadline:
        raise TimeoutError(f"not finished within {timeout_s:g} s") from None
    finally:
        signal.signal(signal.SIGALRM, old_handler)
        if old_delay > 0:  # the caller's own alarm, less the time we took
            signal.setitimer(
                signal.ITIMER_REAL, max(old_delay - (time.monotonic() - start), 1e-3), old_interval
            )


# --- Off the main thread: worker processes ----------------------------------------------------------


class _Worker:
    """One worker process: a JSON request per line on its stdin, a JSON reply per line on its stdout."""

    def __init__(self, argv: list[str]) -> None:
        path = os.pathsep.join(filter(None, [_PACKAGE_PARENT, os.environ.get("PYTHONPATH")]))
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,
            cwd=_PACKAGE_PARENT,
            env={**os.environ, "PYTHONPATH": path},  # the worker imports rllm
            start_new_session=True,  # Ctrl-C reaches the trainer, not its workers (they exit on EOF)
        )
        try:
            if self._read_line(_STARTUP_TIMEOUT_S) != "ready":
                raise OSError(f"the worker process did not start within {_STARTUP_TIMEOUT_S:.0f} s")
        except BaseException:
            self.close()
            raise

    def ask(self, request: dict[str, Any], wait_s: float) -> dict[str, Any] | None:
        """The worker's reply, or None if it has not answered within ``wait_s``."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request).encode() + b"\n")
        line = self._read_line(wait_s)
        if line is None:
            return None
        reply = json.loads(line)
        if not isinstance(reply, dict) or not reply.keys() & {"value", "timeout", "error"}:
            raise ValueError(f"the worker process answered {line[:200]!r}")
        return reply

    def _read_line(self, wait_s: float) -> str | None:
        assert self.proc.stdout is not None
        poller = select.poll()  # not select.select: a trainer may hold more than 1024 file descriptors
        poller.register(self.proc.stdout, select.POLLIN)
        if not poller.poll(max(wait_s, 0.0) * 1000):
            return None
        line = self.proc.stdout.readline()  # unbuffered: reads exactly this line
        if not line:
            raise OSError(f"the worker process exited (code {self.proc.poll()})")
        return line.decode().strip()

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        for pipe in filter(None, (self.proc.stdin, self.proc.stdout)):
            pipe.close()


class _WorkerPool:
    """Worker processes serving one function to callers off the main thread; a worker that misses its
    deadline is killed."""

    def __init__(self, size: int, argv: list[str]) -> None:
        self.pid = os.getpid()
        self._argv = argv
        self._slots = threading.BoundedSemaphore(size)
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()

    def call(self, args: list[Any], timeout_s: float) -> Any:
        request = {"args": args, "timeout_s": timeout_s}
        with self._slots:
            with self._lock:
                worker = self._idle.pop() if self._idle else None
            if worker is not None and worker.proc.poll() is not None:  # it died while idle (OOM killer...)
                worker.close()
                worker = None
            try:
                worker = worker or _Worker(self._argv)
                reply = worker.ask(request, timeout_s + _KILL_GRACE_S)
            except BaseException as error:
                if worker is not None:
                    worker.close()
                if not isinstance(error, (OSError, ValueError)):  # could not start, died, answered garbage
                    raise
                raise WorkerFailed(str(error)) from error
            if reply is None:
                worker.close()
                raise TimeoutError(f"the worker did not answer within {timeout_s:g} s (killed)")
            with self._lock:
                self._idle.append(worker)
        if "error" in reply:
            raise WorkerFailed(f"the function raised in the worker process: {reply['error']}")
        if reply.get("timeout"):
            raise TimeoutError(f"not finished within {timeout_s:g} s")
        return reply["value"]

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.close()


_pools: dict[tuple[str, str | None], _WorkerPool] = {}
_pools_lock = threading.Lock()


def _get_pool(func_name: str, warm_name: str | None) -> _WorkerPool:
    with _pools_lock:
        pool = _pools.get((func_name, warm_name))
        # after a fork the inherited pool's workers belong to the parent: start our own
        if pool is None or pool.pid != os.getpid():
            argv = [sys.executable, "-c", _SERVE, func_name, warm_name or ""]
            pool = _pools[(func_name, warm_name)] = _WorkerPool(_POOL_SIZE, argv)
        return pool


@atexit.register
def _close_pools() -> None:
    for pool in list(_pools.values()):
        if pool.pid == os.getpid():
            pool.close()


def _serve_worker() -> None:
    """Main loop of a worker process (``_SERVE``, then the function's and the warm-up's names); it exits
    when the caller closes its stdin."""
    protocol = sys.stdout
    sys.stdout = sys.stderr  # a stray print must not corrupt the protocol
    func = _resolve(sys.argv[1])
    if sys.argv[2]:
        _resolve(sys.argv[2])()
    protocol.write("ready\n")
    protocol.flush()
    for line in sys.stdin:
        request = json.loads(line)
        reply: dict[str, Any]
        try:
            reply = {"value": _with_alarm(functools.partial(func, *request["args"]), request["timeout_s"])}
        except TimeoutError:
            reply = {"timeout": True}
        except Exception as error:  # noqa: BLE001 - the caller raises it as WorkerFailed; we serve on
            reply = {"error": f"{type(error).__name__}: {error}"[:1000]}
        protocol.write(json.dumps(reply) + "\n")
        protocol.flush()
