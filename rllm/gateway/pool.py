"""Several gateway worker processes in front of the same upstream servers, sharing one trace store.

One gateway process tops out near one core (about 1 ms of CPU per call on the reference machine), so
past ~1,000 calls/s the gateway runs as N **worker processes**: each is the normal gateway app on its own
port, over the same upstream configuration, all writing the same SQLite trace store (WAL; writers from
several processes take turns, each commit a few tens of microseconds). A **session** must always reach
the same worker: that worker keeps the session's upstream worker sticky (its prefix cache warm) and
counts the session's calls (a seeded session seeds its k-th call from k). :func:`route` picks a
session's worker by rendezvous hashing on the session's episode id (the part before the first ``:``, so
the role sub-sessions ``{id}:{role}`` of an episode go where the episode goes): a client needs only the
list of URLs, and removing one worker moves only the sessions that were on it.

The parent binds every worker's listening socket itself and hands it to the child (so a busy port fails
here, in one line, and a restarted worker keeps its port and the connections queued on it), then waits
until each worker answers ``/health``. A worker exits by itself when its parent disappears.

    with GatewayProcesses(4, model="policy", store_path="traces.db",
                          upstreams=["http://10.0.0.5:8001/v1", "http://10.0.0.6:8001/v1"]) as pool:
        pool.urls                 # ['http://127.0.0.1:41234', ...]
        pool.url_for("ep-17")     # the worker that serves session ep-17 (and ep-17:judge)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from typing_extensions import Self

from rllm.gateway.server import probe_upstream, serve
from rllm.gateway.traces import TraceStore

logger = logging.getLogger(__name__)


def session_root(session_id: str) -> str:
    """The episode a session belongs to: ``ep1`` for ``ep1`` and for its role sub-session ``ep1:judge``."""
    return session_id.split(":", 1)[0]


def route(urls: Sequence[str], session_id: str) -> str:
    """The gateway URL that serves ``session_id``: rendezvous (highest-random-weight) hashing of the
    session's episode id over ``urls``. Stable across processes and machines (SHA-1, not Python's
    salted ``hash``), independent of the order of ``urls``; dropping one URL moves only its sessions."""
    if not urls:
        raise ValueError("route() needs at least one gateway URL")
    if len(urls) == 1:
        return urls[0]
    root = session_root(session_id).encode()
    return max(urls, key=lambda u: hashlib.sha1(u.encode() + b"\0" + root).digest())


class GatewayWorkerDied(RuntimeError):
    """A gateway worker process exited (or never came up); the message names it and its exit status."""


@dataclass
class _Worker:
    index: int
    sock: socket.socket
    url: str
    proc: subprocess.Popen | None = None
    started_at: float = 0.0
    restarts: int = 0
    log_path: Path | None = None
    exit_codes: list[int] = field(default_factory=list)


class GatewayProcesses:
    """``workers`` gateway processes on ``host`` (ports ``port .. port+workers-1``, or free ports when
    ``port`` is 0), each serving ``model`` from ``upstreams`` and recording into ``store_path``.

    Blocking (it starts and waits for subprocesses). ``stop()`` (or leaving the ``with`` block) ends
    every worker; nothing is left running. A worker that dies is reported by :meth:`health` and
    :meth:`check`; :meth:`restart_dead` starts it again on its own port.
    """

    def __init__(
        self,
        workers: int,
        *,
        model: str,
        store_path: str | Path,
        upstreams: Sequence[str],
        upstream_kind: str = "auto",
        upstream_model: str | None = None,
        upstream_api_key: str | None = None,
        upstream_timeout_s: float = 600.0,
        api_key: str | None = None,
        max_body_bytes: int = 16 * 1024 * 1024,
        fsync: bool = False,
        host: str = "127.0.0.1",
        port: int = 0,
        log_dir: str | Path | None = None,
        start_timeout_s: float = 60.0,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, not {workers}")
        if not upstreams:
            # Each worker would load its own copy of the model, and a trainer could sync weights into none.
            raise ValueError(
                "several gateway workers need --upstream servers to share (vLLM, SGLang, ...): "
                "the local engine would load the model once per worker; use --workers 1 for it"
            )
        if port and not 0 < port <= 65536 - workers:
            raise ValueError(
                f"ports {port}..{port + workers - 1} are not all in 1-65535: pick a lower --port"
            )
        self.n = workers
        self.host, self.port = host, port
        self.store_path = Path(store_path)
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self.api_key = api_key
        self.start_timeout_s = start_timeout_s
        self._settings: dict[str, Any] = {
            "model": model,
            "store_path": str(self.store_path),
            "upstreams": list(upstreams),
            "upstream_kind": upstream_kind,
            "upstream_model": upstream_model,
            "api_key": api_key,
            "upstream_api_key": upstream_api_key,
            "upstream_timeout_s": upstream_timeout_s,
            "max_body_bytes": max_body_bytes,
            "fsync": fsync,
        }
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()
        self._client: httpx.Client | None = None  # one for every call to the workers (see _http)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> Self:
        # Once, here: a wrong store or an upstream that does not answer fails before any worker starts,
        # and every worker gets the same detected dialect and model name.
        TraceStore(self.store_path, fsync=self._settings["fsync"]).close()
        kind, model = probe_upstream(
            self._settings["upstreams"],
            upstream_kind=self._settings["upstream_kind"],
            upstream_model=self._settings["upstream_model"],
            upstream_api_key=self._settings["upstream_api_key"],
        )
        self._settings.update(upstream_kind=kind, upstream_model=model)
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
        try:
            for i in range(self.n):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    sock.bind((self.host, self.port + i if self.port else 0))
                except OSError as exc:
                    sock.close()
                    raise OSError(
                        f"cannot listen on {self.host}:{self.port + i} for gateway worker {i}: "
                        f"{exc.strerror}: pick another --port"
                    ) from None
                sock.listen(4096)
                sock.set_inheritable(True)
                host, port = sock.getsockname()[:2]
                self._workers.append(_Worker(i, sock, f"http://{host}:{port}"))
            for w in self._workers:
                self._spawn(w)
            self._wait_healthy(self._workers)
        except BaseException:
            self.stop()
            raise
        logger.info("%d gateway workers: %s (traces in %s)", self.n, ", ".join(self.urls), self.store_path)
        return self

    def _spawn(self, w: _Worker, overrides: dict[str, Any] | None = None) -> None:
        cmd = [
            sys.executable,
            "-m",
            "rllm.gateway.pool",
            "--worker-fd",
            str(w.sock.fileno()),
            "--worker-index",
            str(w.index),
            "--parent-pid",
            str(os.getpid()),
        ]
        out: Any = None
        if self.log_dir is not None:
            w.log_path = self.log_dir / f"gateway-worker-{w.index}.log"
            out = open(w.log_path, "ab")  # noqa: SIM115 (the child owns it)
        try:
            # The settings (the API keys among them) go through stdin, not argv: argv is visible to `ps`.
            w.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=out,
                pass_fds=(w.sock.fileno(),),
                start_new_session=True,
            )
            assert w.proc.stdin is not None
            w.proc.stdin.write(json.dumps({**self._settings, **(overrides or {})}).encode())
            w.proc.stdin.close()
        finally:
            if out is not None:
                out.close()
        w.started_at = time.monotonic()

    def _http(self) -> httpx.Client:
        """The client of every call this object makes to its workers, made once: building an
        ``httpx.Client`` builds an SSL context (the CA bundle read and parsed, milliseconds of CPU)."""
        if self._client is None:
            headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
            self._client = httpx.Client(headers=headers, timeout=5)
        return self._client

    def _wait_healthy(self, workers: list[_Worker]) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        pending = list(workers)
        client = self._http()
        while pending:
            for w in list(pending):
                assert w.proc is not None
                if w.proc.poll() is not None:
                    raise GatewayWorkerDied(
                        f"gateway worker {w.index} ({w.url}) exited with status "
                        f"{w.proc.returncode} while starting{self._log_tail(w)}"
                    )
                try:
                    if client.get(f"{w.url}/health").status_code == 200:
                        pending.remove(w)
                except httpx.HTTPError:
                    pass
            if pending and time.monotonic() > deadline:
                raise GatewayWorkerDied(
                    f"gateway worker(s) {', '.join(w.url for w in pending)} did not answer "
                    f"/health within {self.start_timeout_s:g} s{self._log_tail(pending[0])}"
                )
            if pending:
                time.sleep(0.05)

    def stop(self, timeout_s: float = 10.0) -> None:
        """End every worker (SIGTERM, then SIGKILL after ``timeout_s``) and close the listening sockets."""
        with self._lock:
            procs = [w.proc for w in self._workers if w.proc is not None]
            for p in procs:
                if p.poll() is None:
                    p.terminate()
            deadline = time.monotonic() + timeout_s
            for p in procs:
                try:
                    p.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            for w in self._workers:
                w.sock.close()
            self._workers = []
            if self._client is not None:
                self._client.close()
                self._client = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ routing and health
    @property
    def urls(self) -> list[str]:
        """Every worker's base URL (``{url}/v1``, ``{url}/sessions/{id}/v1``), in worker order."""
        return [w.url for w in self._workers]

    @property
    def pids(self) -> list[int]:
        return [w.proc.pid for w in self._workers if w.proc is not None]

    def url_for(self, session_id: str) -> str:
        """The worker that serves ``session_id`` (see :func:`route`)."""
        return route(self.urls, session_id)

    def health(self) -> list[dict[str, Any]]:
        """One entry per worker: ``url``, ``pid``, ``running``, ``exit_code`` (None while running),
        ``restarts``, and ``ok`` (its ``/health`` answered 200: it runs and its upstream is healthy)."""
        out = []
        client = self._http()
        for w in self._workers:
            assert w.proc is not None
            code = w.proc.poll()
            ok = False
            if code is None:
                try:
                    ok = client.get(f"{w.url}/health").status_code == 200
                except httpx.HTTPError:
                    ok = False
            out.append(
                {
                    "url": w.url,
                    "pid": w.proc.pid,
                    "running": code is None,
                    "exit_code": code,
                    "restarts": w.restarts,
                    "ok": ok,
                }
            )
        return out

    def dead(self) -> list[tuple[str, int]]:
        """``(url, exit status)`` of every worker that has exited."""
        return [
            (w.url, w.proc.returncode)
            for w in self._workers
            if w.proc is not None and w.proc.poll() is not None
        ]

    def check(self) -> None:
        """Raise :class:`GatewayWorkerDied` naming every worker that has exited."""
        dead = self.dead()
        if dead:
            raise GatewayWorkerDied(
                "gateway worker(s) exited: " + ", ".join(f"{u} (status {c})" for u, c in dead)
            )

    def restart_dead(self, *, min_uptime_s: float = 10.0) -> list[str]:
        """Start every exited worker again on its own port (its socket stayed open here, so clients'
        connections queue meanwhile); return their URLs. A worker that died within ``min_uptime_s`` of
        its start is not restarted but raised (:class:`GatewayWorkerDied`): it would only die again.

        A restarted worker starts with the policy (model name, weight version) a running sibling reports,
        so the trainer's last ``POST /admin/policy`` holds for it too and its traces carry the version
        the others record. Cheap when every worker runs (one ``poll()`` each, nothing asked of them): a
        supervisor calls it every fraction of a second."""
        if not self.dead():
            return []
        restarted = []
        policy = self._sibling_policy()
        with self._lock:
            for w in self._workers:
                assert w.proc is not None
                code = w.proc.poll()
                if code is None:
                    continue
                lived = time.monotonic() - w.started_at
                if lived < min_uptime_s:
                    raise GatewayWorkerDied(
                        f"gateway worker {w.index} ({w.url}) exited with status {code} after "
                        f"{lived:.1f} s: not restarting it{self._log_tail(w)}"
                    )
                logger.warning(
                    "gateway worker %d (%s) exited with status %s after %.0f s: restarting it",
                    w.index,
                    w.url,
                    code,
                    lived,
                )
                w.exit_codes.append(code)
                w.restarts += 1
                self._spawn(w, policy)
                restarted.append(w)
        if restarted:
            self._wait_healthy(restarted)
        return [w.url for w in restarted]

    def _sibling_policy(self) -> dict[str, Any]:
        """``upstream_model`` and ``weight_version`` as the first running worker's ``/health`` reports them
        (what ``POST /admin/policy`` last set there); empty when none answers."""
        client = self._http()
        for w in self._workers:
            if w.proc is None or w.proc.poll() is not None:
                continue
            try:
                h = client.get(f"{w.url}/health").json()
            except (httpx.HTTPError, ValueError):
                continue
            if isinstance(h, dict) and "weight_version" in h:
                out: dict[str, Any] = {"weight_version": int(h["weight_version"])}
                if h.get("model"):
                    out["upstream_model"] = h["model"]
                if h.get("adapters"):
                    out["upstream_adapters"] = h["adapters"]
                return out
        return {}

    def _log_tail(self, w: _Worker, lines: int = 12) -> str:
        if w.log_path is None or not w.log_path.is_file():
            return ""
        tail = w.log_path.read_text(errors="replace").splitlines()[-lines:]
        return (f"; the end of its log {w.log_path}:\n" + "\n".join(tail)) if tail else ""


# ---------------------------------------------------------------------------------------------------------
# The worker process: `python -m rllm.gateway.pool --worker-fd FD ...`, settings as JSON on stdin.


def _exit_with_parent(parent_pid: int, poll_s: float = 1.0) -> None:
    """A worker must not outlive the process that started it (a parent killed with SIGKILL cannot stop
    its children): when the parent is gone, this worker ends itself."""

    def watch() -> None:
        while True:
            time.sleep(poll_s)
            if os.getppid() != parent_pid:
                os._exit(0)

    threading.Thread(target=watch, daemon=True, name="rllm-gateway-parent-watch").start()


def _worker_main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rllm.gateway.pool")
    p.add_argument("--worker-fd", type=int, required=True)
    p.add_argument("--worker-index", type=int, required=True)
    p.add_argument("--parent-pid", type=int, required=True)
    args = p.parse_args(argv)
    settings = json.loads(sys.stdin.read())
    logging.basicConfig(
        level=logging.WARNING, format=f"gateway worker {args.worker_index}: %(levelname)s %(message)s"
    )
    _exit_with_parent(args.parent_pid)
    serve(fd=args.worker_fd, host="", port=0, probe=False, **settings)
    return 0


if __name__ == "__main__":
    sys.exit(_worker_main())
