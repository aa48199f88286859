"""Several gateway worker processes over one trace store (rllm.gateway.pool): sessions routed by a stable
hash and kept sticky, every trace stored once, a dead worker reported and restarted on its port, nothing
left running after stop; `rllm gateway --workers N`, whose supervisor asks its workers nothing while none
has died; GatewayWorkflow spreading episodes over the workers.

The upstreams are real servers: two in-process rllm gateways over the tiny model (they speak vLLM's
``return_token_ids`` dialect); the workers are real subprocesses on loopback ports.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

import rllm
from rllm.gateway.app import create_app
from rllm.gateway.pool import GatewayProcesses, GatewayWorkerDied, route
from rllm.gateway.server import GatewayServer
from rllm.gateway.traces import TraceQuery, TraceStore
from rllm.inference.base import SamplingParams
from rllm.inference.local import LocalEngine
from rllm.runner.workflow_runner import WorkflowRunner
from rllm.sdk import AgentConfig, GatewayWorkflow


@pytest.fixture(scope="module")
def upstreams(tiny_engine: LocalEngine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    tmp = tmp_path_factory.mktemp("pool-upstreams")
    servers, stores = [], []
    for i in range(2):
        stores.append(TraceStore(tmp / f"upstream{i}.db"))
        servers.append(GatewayServer(create_app(tiny_engine, stores[-1], model_name="tiny-upstream")).start())
    yield [s.url for s in servers]
    for s, st in zip(servers, stores):
        s.stop()
        st.close()


@pytest.fixture(scope="module")
def pool(upstreams: list[str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcesses]:
    tmp = tmp_path_factory.mktemp("pool")
    with GatewayProcesses(
        3,
        model="policy",
        store_path=tmp / "traces.db",
        upstreams=upstreams,
        upstream_kind="vllm",
        api_key="k",
        log_dir=tmp / "logs",
    ) as p:
        yield p
    assert all(not _alive(pid) for pid in p.pids)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its parent) is not running.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_route_is_stable_balanced_and_keeps_an_episode_together() -> None:
    urls = [f"http://10.0.0.{i}:8000" for i in range(4)]
    sessions = [f"ep{i}" for i in range(4000)]
    picks = {s: route(urls, s) for s in sessions}
    assert picks == {
        s: route(list(reversed(urls)), s) for s in sessions
    }  # the order of the list is irrelevant
    assert all(route(urls, f"{s}:judge") == route(urls, f"{s}:solver") == picks[s] for s in sessions[:200])
    counts = Counter(picks.values())
    assert set(counts) == set(urls) and min(counts.values()) > 4000 / 4 * 0.85  # within 15 % of even
    # Dropping a worker moves only the sessions that were on it.
    fewer = urls[:3]
    moved = [s for s in sessions if route(fewer, s) != picks[s]]
    assert moved and all(picks[s] == urls[3] for s in moved)
    assert route(urls[:1], "x") == urls[0]
    with pytest.raises(ValueError, match="at least one"):
        route([], "x")


def test_the_local_engine_is_refused_for_several_workers(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="need --upstream"):
        GatewayProcesses(2, model="m", store_path=tmp_path / "t.db", upstreams=[])


def test_sessions_are_routed_sticky_and_every_trace_is_stored_once(pool: GatewayProcesses) -> None:
    sessions = [f"pool-ep{i}" for i in range(12)]
    calls_per_session = 3

    async def run_session(s: str) -> list[str]:
        ids = []
        for k in range(calls_per_session):
            role = f"{s}:judge" if k == 2 else s  # a role sub-session goes where its episode goes
            client = openai.AsyncOpenAI(
                base_url=f"{pool.url_for(s)}/sessions/{role}/v1", api_key="k", max_retries=0
            )
            resp = await client.chat.completions.create(
                model="policy", max_tokens=3, messages=[{"role": "user", "content": f"{s} {k}"}]
            )
            ids.append(resp.id)
            await client.close()
        return ids

    async def main() -> list[list[str]]:
        return await asyncio.gather(*(run_session(s) for s in sessions))

    request_ids = [i for ids in asyncio.run(main()) for i in ids]
    assert len({pool.url_for(s) for s in sessions}) > 1  # the sessions were spread over the workers
    with TraceStore(pool.store_path) as store:
        rows = store.query(TraceQuery(session_prefix="pool-ep", limit=10_000))
    assert sorted(t.request_id for _, t in rows) == sorted(request_ids)  # each call once, none lost
    for s in sessions:
        mine = [t for _, t in rows if t.session_id in (s, f"{s}:judge")]
        assert len(mine) == calls_per_session and all(t.trainable for t in mine)
        # One worker served each session, so the session's calls stuck to one upstream server.
        assert len({t.upstream for t in mine if t.session_id == s}) == 1
    # The store is shared: any worker lists a session's traces.
    headers = {"Authorization": "Bearer k"}
    for url in pool.urls:
        r = httpx.get(f"{url}/sessions/{sessions[0]}/traces", headers=headers, timeout=30)
        assert r.status_code == 200 and len(r.json()["traces"]) == 2


def test_gateway_workflow_spreads_episodes_over_the_workers(
    pool: GatewayProcesses, tiny_engine: LocalEngine
) -> None:
    @rllm.rollout
    async def agent(task: dict, config: AgentConfig) -> float:
        client = openai.AsyncOpenAI(base_url=config.base_url, api_key="k", max_retries=0)
        await client.chat.completions.create(
            model=config.model, max_tokens=3, messages=[{"role": "user", "content": task["q"]}]
        )
        await client.close()
        return 1.0

    wf = GatewayWorkflow(agent, gateway_url=pool.urls, model="policy", api_key="k")
    eng = WorkflowRunner(
        wf, tiny_engine, SamplingParams(temperature=1.0, max_tokens=3, seed=3), show_progress=False
    )
    episodes = asyncio.run(
        eng.run_tasks([{"task_id": f"wf{i}", "q": f"q{i}"} for i in range(6)], group_size=2)
    )
    assert all(not e.failed for e in episodes), [e.error for e in episodes]
    assert len({wf.url_for(e.id) for e in episodes}) > 1
    with TraceStore(pool.store_path) as store:
        for e in episodes:
            (trace,) = store.list(e.id)
            (step,) = e.trajectories[0].steps
            assert step.response_ids == trace.completion_token_ids
            assert store.session(e.id).sampling["seed"] is not None  # opened on its worker with the overrides


def test_a_killed_worker_is_reported_restarted_on_its_port_and_stop_leaves_nothing(
    upstreams: list[str], tmp_path: Path
) -> None:
    p = GatewayProcesses(
        2,
        model="policy",
        store_path=tmp_path / "traces.db",
        upstreams=upstreams,
        upstream_kind="vllm",
        log_dir=tmp_path / "logs",
    ).start()
    try:
        victim = p.urls[1]
        pid = p.pids[1]
        for url in p.urls:  # the trainer's weight sync, as it sets every worker's policy
            r = httpx.post(f"{url}/admin/policy", json={"model": None, "weight_version": 5}, timeout=30)
            assert r.status_code == 200, r.text
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        # Until the pool sees it exited: /proc shows a killed multi-threaded process as a zombie while its
        # other threads still exit, before waitpid can reap it (and poll() report it).
        while not p.dead():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        health = p.health()
        assert health[0]["running"] and health[0]["ok"]
        assert health[1] == {
            "url": victim,
            "pid": pid,
            "running": False,
            "exit_code": -signal.SIGKILL,
            "restarts": 0,
            "ok": False,
        }
        with pytest.raises(GatewayWorkerDied, match=f"{victim} \\(status -9\\)"):
            p.check()
        with pytest.raises(GatewayWorkerDied, match="not restarting"):
            p.restart_dead(min_uptime_s=3600)  # died "too soon": it would only die again
        assert p.restart_dead(min_uptime_s=0) == [victim]
        assert p.urls[1] == victim and p.pids[1] != pid and p.health()[1]["ok"]
        r = httpx.post(
            f"{victim}/sessions/after-restart/v1/completions",
            timeout=30,
            json={"model": "policy", "prompt": "The", "max_tokens": 2},
        )
        assert r.status_code == 200, r.text
        # The restarted worker took its sibling's policy: its traces record the version the others do.
        with TraceStore(tmp_path / "traces.db") as store:
            (trace,) = store.list("after-restart")
        assert trace.weight_version == 5 and trace.upstream in [f"{u}/v1" for u in upstreams]
        pids = p.pids
    finally:
        p.stop()
    assert all(not _alive(pid) for pid in pids)


def _free_port_pair() -> int:
    for _ in range(50):
        with socket.socket() as a:
            a.bind(("127.0.0.1", 0))
            port = a.getsockname()[1]
            with socket.socket() as b:
                try:
                    b.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
                return port
    raise RuntimeError("no two consecutive free ports")


def test_gateway_command_with_workers_prints_urls_and_stops_them(
    upstreams: list[str], tmp_path: Path
) -> None:
    port = _free_port_pair()
    cmd = [
        sys.executable,
        "-m",
        "rllm.cli.main",
        "gateway",
        "--model",
        "policy",
        "--port",
        str(port),
        "--workers",
        "2",
        "--upstream",
        upstreams[0],
        "--upstream-kind",
        "vllm",
        "--store",
        str(tmp_path / "traces.db"),
        "--log-dir",
        str(tmp_path / "logs"),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(3)]
        assert (
            lines[1].strip() == f"http://127.0.0.1:{port}/v1"
            and lines[2].strip() == f"http://127.0.0.1:{port + 1}/v1"
        )
        for p in (port, port + 1):
            r = httpx.post(
                f"http://127.0.0.1:{p}/sessions/cli-{p}/v1/completions",
                timeout=30,
                json={"model": "policy", "prompt": "The", "max_tokens": 2},
            )
            assert r.status_code == 200, r.text
        children = [int(c) for c in Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()]
        assert len(children) == 2
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert all(not _alive(c) for c in children)
    with TraceStore(tmp_path / "traces.db") as store:
        assert {s for s in store.sessions()} == {f"cli-{port}", f"cli-{port + 1}"}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "rllm.cli.main",
            "gateway",
            "--model",
            "m",
            "--workers",
            "2",
            "--store",
            str(tmp_path / "t2.db"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 2 and "need --upstream" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def _connections_to(ports: list[int]) -> dict[tuple[str, str, str], str]:
    """Every TCP connection to ``ports`` on this machine, as the kernel lists it (``ss``): (state, local
    address, peer address) -> its bytes and segments sent and received so far (none for TIME-WAIT)."""
    where = " or ".join(f"dport = :{p}" for p in ports).split()
    out = subprocess.run(["ss", "-tanHi", "(", *where, ")"], capture_output=True, text=True, check=True)
    conns: dict[tuple[str, str, str], str] = {}
    key = None
    for line in out.stdout.splitlines():
        if line.strip() and not line[0].isspace():
            state, _, _, local, peer = line.split()[:5]
            key = (state, local, peer)
            conns[key] = ""
        elif key is not None:
            counters = ("bytes_acked", "bytes_received", "segs_out", "segs_in")
            conns[key] += " ".join(f for f in line.split() if f.split(":")[0] in counters)
    return conns


def _read_chars(pid: int) -> int:
    """Bytes process ``pid`` has read with read() and the like (files: building an HTTP client's SSL
    context reads the CA bundle, ~200 KB)."""
    fields = dict(line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())
    return int(fields["rchar"])


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2) to read the kernel's TCP table")
def test_an_idle_supervisor_asks_its_workers_nothing(upstreams: list[str], tmp_path: Path) -> None:
    """`rllm gateway --workers N` polls its workers' processes, not their HTTP endpoints: while none has died
    it opens no connection to them, sends nothing on the one it keeps, and builds no HTTP client."""
    port = _free_port_pair()
    cmd = [sys.executable, "-m", "rllm.cli.main", "gateway", "--model", "policy", "--port", str(port)]
    cmd += ["--workers", "2", "--upstream", upstreams[0], "--upstream-kind", "vllm"]
    cmd += ["--store", str(tmp_path / "traces.db"), "--log-dir", str(tmp_path / "logs")]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("2 gateway workers")
        for p in (port, port + 1):
            r = httpx.post(
                f"http://127.0.0.1:{p}/sessions/idle-{p}/v1/completions",
                timeout=30,
                json={"model": "policy", "prompt": "The", "max_tokens": 2},
            )
            assert r.status_code == 200, r.text
        time.sleep(1.0)  # past the supervisor's start-up and a few of its 0.5 s ticks
        before, read_before = _connections_to([port, port + 1]), _read_chars(proc.pid)
        time.sleep(3.0)
        after, read_after = _connections_to([port, port + 1]), _read_chars(proc.pid)
        assert proc.poll() is None
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    # No new connection (a client per tick leaves one, TIME-WAIT at least) and no byte on the old ones.
    assert {k: v for k, v in after.items() if before.get(k) != v} == {}
    assert read_after - read_before < 16 * 1024, "the supervisor read files while idle (a new HTTP client?)"
