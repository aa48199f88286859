"""The fault scenarios of the fault-injection suite: each injects one real fault into real rllm code and
counts, from the durable records, what happened. ``tests/faults`` asserts on them; ``bench_faults.py``
prints them.

Every scenario returns a :class:`FaultRow`:

- ``injected``: faults the injector really caused (its own count: calls answered 500, calls left hanging,
  raises, crashes, kills);
- ``retried``: work rllm did again because of a fault (episode attempts after a failed one, upstream calls
  retried, steps redone after a resume);
- ``failed``: work that still failed, each recorded with its reason (an episode's termination reason and
  error, a tool result's error, the gateway's error reply); ``reasons`` counts them by reason;
- ``lost``: work acknowledged and then missing from the durable record (an episode missing from what the
  engine returned, an acknowledged call without its trace row, a step missing from metrics.jsonl);
- ``duplicated``: work in the durable record more than once (an episode returned twice, a call with two
  trace rows, a step logged twice).

Lost and duplicated are counted from the trace store's rows per session, the episodes returned and the run's
logged steps, never from rllm's own counters.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from _fault_servers import FAKE_MODEL, FlakyServer, GatewayUnderTest

import rllm
from rllm.gateway.traces import TraceQuery, TraceStore
from rllm.inference.base import SamplingParams
from rllm.runner.workflow_runner import WorkflowRunner
from rllm.sdk.workflow import GatewayWorkflow
from rllm.tool_calls import ToolCall
from rllm.tools import ToolRegistry, make_python_tool, tool
from rllm.types import Episode

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class FaultRow:
    """What one fault did (see the module docstring for each count)."""

    fault: str
    injected: int = 0
    retried: int = 0
    failed: int = 0
    lost: int = 0
    duplicated: int = 0
    reasons: Counter[str] = field(default_factory=Counter)
    note: str = ""
    skipped: str | None = None  # why this fault was not run (the line says so; it is never counted as passed)

    def line(self) -> str:
        if self.skipped:
            return f"{self.fault}: SKIPPED ({self.skipped})"
        why = "; ".join(f"{n}x {r}" for r, n in self.reasons.most_common(3))
        return (
            f"{self.fault}: injected={self.injected} retried={self.retried} failed={self.failed} "
            f"lost={self.lost} duplicated={self.duplicated}"
            + (f" (failed: {why})" if why else "")
            + (f" [{self.note}]" if self.note else "")
        )


def total_line(rows: list[FaultRow]) -> str:
    ran = [r for r in rows if not r.skipped]
    s = {k: sum(getattr(r, k) for r in ran) for k in ("injected", "retried", "failed", "lost", "duplicated")}
    return (
        f"total: injected={s['injected']} retried={s['retried']} failed={s['failed']} "
        f"lost={s['lost']} duplicated={s['duplicated']}"
    )


# ---------------------------------------------------------------------------------------------------------
# Episodes through the real gateway, and what the durable records say about them.


def _short(text: str | None) -> str:
    line = (text or "").strip().splitlines()[-1:] or [""]
    return line[0][:120]


def count_episodes(
    row: FaultRow, episodes: list[Episode], jobs: int, store: TraceStore, acknowledged: dict[str, list[str]]
) -> None:
    """Fill ``row``'s retried / failed / lost / duplicated from the episodes returned and the trace store.

    ``acknowledged``: for each session (episode id), the request ids of the calls whose reply its agent
    received (the client's record). Lost: a job with no episode, or an acknowledged call with no trace row;
    duplicated: an episode returned twice, or a call with more trace rows than choices."""
    ids = [e.id for e in episodes]
    row.lost += max(0, jobs - len(set(ids)))
    row.duplicated += len(ids) - len(set(ids))
    row.retried += sum(e.attempt for e in episodes)
    for e in episodes:
        if e.failed:
            row.failed += 1
            row.reasons[f"{e.termination_reason.value}: {_short(e.error)}"] += 1
    rows = store.query(TraceQuery(limit=10_000))
    per_request = Counter((t.request_id, t.choice_index) for _, t in rows)
    row.duplicated += sum(n - 1 for n in per_request.values() if n > 1)
    stored = {rid for rid, _ in per_request}
    for request_ids in acknowledged.values():
        row.lost += sum(rid not in stored for rid in request_ids)
        row.duplicated += len(request_ids) - len(set(request_ids))
    # A successful episode's steps are its session's rows: one per acknowledged call.
    for e in episodes:
        if not e.failed:
            steps = sum(len(t.steps) for t in e.trajectories)
            have = len(acknowledged.get(e.id, []))
            row.lost += max(0, have - steps)


def _flow(acknowledged: dict[str, list[str]], calls: int, before_call: Callable[[dict, Any], None] | None):
    """A real ``@rllm.rollout`` agent: ``calls`` chat calls through its gateway session with the ``openai``
    client (no client-side retries: rllm's gateway does the retrying), each acknowledged reply's id written
    to ``acknowledged[session]``."""

    @rllm.rollout
    async def agent(task: dict, config: rllm.AgentConfig) -> float:
        client = config.async_client()
        messages = [{"role": "user", "content": task["question"]}]
        for turn in range(calls):
            if before_call is not None:
                before_call(config.sampling, turn)
            reply = await client.chat.completions.create(model=config.model, messages=messages, max_tokens=4)
            acknowledged.setdefault(config.session_id, []).append(reply.id)
            messages += [
                {"role": "assistant", "content": reply.choices[0].message.content or ""},
                {"role": "user", "content": "and then?"},
            ]
        return 1.0

    return agent


def run_episodes(
    gateway: GatewayUnderTest,
    flow: Any,
    *,
    tasks: int,
    group_size: int = 2,
    retries: int = 1,
    seed: int = 0,
) -> tuple[list[Episode], int]:
    """Run ``tasks`` x ``group_size`` episodes of ``flow`` through the workflow runner and the gateway."""
    workflow = GatewayWorkflow(flow, gateway_url=gateway.url, model=FAKE_MODEL, store=gateway.store)
    engine = WorkflowRunner(
        workflow, None, SamplingParams(max_tokens=4, seed=seed), retries=retries, max_concurrency=16,
        show_progress=False,
    )  # fmt: skip
    task_list = [{"task_id": f"t{i}", "question": f"Which is larger, {i} or {i + 7}?"} for i in range(tasks)]
    episodes = asyncio.run(engine.run_tasks(task_list, group_size=group_size))
    return episodes, tasks * group_size


# ---------------------------------------------------------------------------------------------------------
# 1. Agent code that raises in 20 % of episode attempts.


def raises_for(sampling: dict[str, Any]) -> bool:
    """The agent's fault: an attempt raises when its seed hashes to 0 mod 5 (20 %, fixed by the seed)."""
    return zlib.crc32(str(sampling.get("seed")).encode()) % 5 == 0


def agent_raises(work: Path, *, tasks: int = 20) -> FaultRow:
    row = FaultRow("agent code raises (20 % of attempts)")
    acknowledged: dict[str, list[str]] = {}

    def before_call(sampling: dict[str, Any], turn: int) -> None:
        if turn == 1 and raises_for(sampling):  # after one recorded call: a half-done episode
            row.injected += 1
            raise RuntimeError(f"injected agent fault (seed {sampling.get('seed')})")

    with FlakyServer() as server, GatewayUnderTest([server.url], work / "agent.db") as gw:
        episodes, jobs = run_episodes(gw, _flow(acknowledged, 2, before_call), tasks=tasks)
        count_episodes(row, episodes, jobs, gw.store, acknowledged)
    return row


# ---------------------------------------------------------------------------------------------------------
# 2 and 3. Upstream servers that answer 5xx, or accept a call and hang.


def flaky_upstream(
    work: Path, *, name: str, tasks: int, error_every: int = 0, hang_every: int = 0, timeout_s: float = 600.0
) -> FaultRow:
    """Two real upstream servers behind the real gateway, each failing its calls as told; episodes of a
    two-call agent run through them."""
    row = FaultRow(name)
    acknowledged: dict[str, list[str]] = {}
    servers = [FlakyServer(error_every=error_every, hang_every=hang_every, phase=p).start() for p in (0, 3)]
    try:
        with GatewayUnderTest([s.url for s in servers], work / f"{name[:8]}.db", timeout_s=timeout_s) as gw:
            episodes, jobs = run_episodes(gw, _flow(acknowledged, 2, None), tasks=tasks)
            count_episodes(row, episodes, jobs, gw.store, acknowledged)
            row.retried += gw.upstream.retried
            calls = sum(s.calls for s in servers)
            row.note = f"{calls} upstream calls, {gw.upstream.rerouted} re-routed"
    finally:
        for s in servers:
            s.stop()
    row.injected = sum(s.errors + s.hangs for s in servers)
    return row


def upstream_5xx(work: Path, *, tasks: int = 25) -> FaultRow:
    return flaky_upstream(work, name="upstream answers 500 (10 % of calls)", tasks=tasks, error_every=10)


def upstream_hangs(work: Path, *, tasks: int = 20, timeout_s: float = 1.0) -> FaultRow:
    return flaky_upstream(
        work, name="upstream hangs (5 % of calls)", tasks=tasks, hang_every=20, timeout_s=timeout_s
    )


# ---------------------------------------------------------------------------------------------------------
# 4. Tools that crash: a tool function raising, and a tool's subprocess killed.


@tool
def lookup(n: int) -> str:
    """Look a number up.

    Args:
        n: The number.
    """
    if n % 5 == 0:
        raise ValueError(f"injected tool fault: lookup({n}) crashed")
    return f"{n} is fine"


def tools_crash(work: Path, *, tasks: int = 10) -> FaultRow:
    """Each episode makes one model call, then calls ``lookup`` (raises for 1 in 5 arguments) and the
    sandboxed ``python`` tool, whose process SIGKILLs itself for 1 in 5 episodes."""
    row = FaultRow("tools crash (raise / subprocess killed)")
    acknowledged: dict[str, list[str]] = {}
    python = make_python_tool(timeout_s=10, isolation="none")
    registry = ToolRegistry([lookup, python])
    counter = iter(range(10**9))
    results: list[Any] = []

    @rllm.rollout
    async def agent(task: dict, config: rllm.AgentConfig) -> rllm.Outcome:
        reply = await config.async_client().chat.completions.create(
            model=config.model, messages=[{"role": "user", "content": task["question"]}], max_tokens=4
        )
        acknowledged.setdefault(config.session_id, []).append(reply.id)
        n = next(counter)
        code = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)" if n % 5 == 2 else "print(6 * 7)"
        row.injected += (n % 5 == 0) + (n % 5 == 2)
        out = await registry.execute_all(
            [
                ToolCall(id=f"a{n}", name="lookup", arguments=f'{{"n": {n}}}'),
                ToolCall(id=f"b{n}", name="python", arguments=f'{{"code": "{code}"}}'),
            ]
        )
        results.extend(out)
        return rllm.Outcome(reward=1.0)

    with FlakyServer() as server, GatewayUnderTest([server.url], work / "tools.db") as gw:
        episodes, jobs = run_episodes(gw, agent, tasks=tasks, retries=0)
        count_episodes(row, episodes, jobs, gw.store, acknowledged)
    ids = Counter(r.call_id for r in results)
    row.lost += 2 * jobs - len(ids)  # every call has a result
    row.duplicated += sum(n - 1 for n in ids.values())
    for r in results:
        if r.error is not None:
            row.failed += 1
            row.reasons[f"tool {r.error}: {_short(r.content)}"] += 1
        elif "Exit code" in r.content:  # the sandbox's process died: the model reads why
            row.failed += 1
            row.reasons[f"tool process died: {_short(r.content)}"] += 1
    return row


# ---------------------------------------------------------------------------------------------------------
# 6. The trace store's disk writes failing (RLIMIT_FSIZE on a real gateway process: writes past the limit
# fail with EFBIG, which SQLite reports as a full disk).


def _gateway_process(upstream: str, store: Path, log: Path) -> tuple[subprocess.Popen, str]:
    """``rllm gateway`` as a user starts it, on a free loopback port."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = log.open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "rllm", "gateway", "--model", FAKE_MODEL, "--upstream", upstream,
         "--upstream-kind", "vllm", "--store", str(store), "--port", str(port)],
        stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the gateway exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"the gateway did not come up: {log.read_text()[-2000:]}")


def store_write_fails(work: Path, *, calls: int = 30) -> FaultRow:
    """Calls before, during and after a window in which the gateway process cannot grow any file: those in
    the window must get a clear error (and leave no row), every acknowledged one must have its row."""
    row = FaultRow("trace store write fails (file size limit)")
    store_path = work / "store_fault.db"
    with FlakyServer() as server:
        proc, url = _gateway_process(server.url, store_path, work / "gateway.log")
        acknowledged: list[str] = []
        try:
            with httpx.Client(base_url=url, timeout=30) as client:

                def call(i: int) -> httpx.Response:
                    r = client.post(
                        f"/sessions/s{i}/v1/chat/completions",
                        json={"model": FAKE_MODEL, "messages": [{"role": "user", "content": f"q{i}"}]},
                    )
                    if r.status_code == 200:
                        acknowledged.append(r.json()["id"])
                    return r

                for i in range(calls // 3):
                    assert call(i).status_code == 200
                wal = store_path.with_name(store_path.name + "-wal")
                size = wal.stat().st_size
                # The soft limit only: lowering and restoring it needs no privilege, unlike the hard one.
                soft, hard = resource.prlimit(proc.pid, resource.RLIMIT_FSIZE, (size, resource.RLIM_INFINITY))
                try:
                    for i in range(calls // 3, 2 * calls // 3):
                        row.injected += 1
                        r = call(i)
                        if r.status_code != 200:
                            row.failed += 1
                            row.reasons[f"{r.status_code}: {_short(r.json()['error']['message'])}"] += 1
                finally:
                    resource.prlimit(proc.pid, resource.RLIMIT_FSIZE, (soft, hard))
                for i in range(2 * calls // 3, calls):
                    if call(i).status_code != 200:
                        row.lost += 1  # the store did not recover
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    with TraceStore(store_path) as store:
        rows = store.query(TraceQuery(limit=10_000))
    stored = Counter(t.request_id for _, t in rows)
    row.lost += sum(rid not in stored for rid in acknowledged)
    row.duplicated += sum(n - 1 for n in stored.values())
    row.duplicated += len(set(stored) - set(acknowledged))  # a row for a call whose client got an error
    row.note = f"{len(acknowledged)} calls acknowledged, {len(rows)} rows"
    return row


def quick_work_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="rllm-faults-"))


# ---------------------------------------------------------------------------------------------------------
# 7. The trainer SIGKILLed mid-run, then resumed; and the run under faults 1-4 at once. Both run
# _faults_train.py in processes of their own.

TRAIN_JOB = Path(__file__).with_name("_faults_train.py")


def tiny_overrides(model_dir: str | Path, *extra: str) -> list[str]:
    """A tiny CPU run of the default task (the settings of tests/run_support.py's tiny_run_config)."""
    return [
        f"model.path={model_dir}",
        "trainer.threads=1",
        "trainer.loggers=[jsonl]",
        "trainer.plot=false",
        "eval.before=false",
        "eval.after=false",
        "backend.device=cpu",
        "lora.rank=4",
        "lora.alpha=8",
        "rollout.batch_size=2",
        "rollout.group_size=4",
        "rollout.max_tokens=4",
        "data.train_size=64",
        "data.test_size=8",
        *extra,
    ]


def _job(runs: Path, name: str, args: list[str], log: Path, timeout_s: float) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'benchmarks'}"}
    out = log.open("a")
    return subprocess.Popen(
        [sys.executable, str(TRAIN_JOB), str(runs), name, *args],
        stdout=out,
        stderr=subprocess.STDOUT,
        env=env,
    )


def logged_steps(run_dir: Path) -> Counter[int]:
    """How many times each step is in the run's metrics.jsonl (the durable step record)."""
    path = run_dir / "metrics.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return Counter(int(json.loads(line)["step"]) for line in lines if line.strip())


def step_counts(row: FaultRow, steps: Counter[int], expected: int) -> None:
    row.lost += sum(s not in steps for s in range(1, expected + 1))
    row.duplicated += sum(n - 1 for n in steps.values() if n > 1)
    # Step 0 is the held-out eval before training (eval.before), logged once like any step.
    row.duplicated += sum(n for s, n in steps.items() if not 0 <= s <= expected)


def trainer_killed(work: Path, model_dir: str | Path, *, steps: int = 4, kill_after: int = 2) -> FaultRow:
    """A real training process SIGKILLed once it has logged ``kill_after`` steps (mid-step, or mid-
    checkpoint: wherever the signal lands), then resumed with ``trainer.resume=true``."""
    row = FaultRow("trainer SIGKILLed, resumed")
    runs, log = work / "killed", work / "killed.log"
    args = tiny_overrides(model_dir, f"trainer.steps={steps}", "trainer.checkpoint_every=1")
    proc = _job(runs, "job", args, log, 300)
    deadline = time.monotonic() + 300
    try:
        while sum(logged_steps(runs / "job").values()) < kill_after:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the job ended before step {kill_after}:\n{log.read_text()[-3000:]}")
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    row.injected = 1
    assert proc.returncode == -signal.SIGKILL, f"the job was not killed:\n{log.read_text()[-3000:]}"
    before = logged_steps(runs / "job")
    resumed = _job(runs, "job", [*args, "trainer.resume=true"], log, 300)
    if resumed.wait(300) != 0:
        raise RuntimeError(f"the resumed job failed:\n{log.read_text()[-3000:]}")
    after = logged_steps(runs / "job")
    # Steps redone: the killed run logged them (or was inside them) after its last checkpoint.
    text = log.read_text()
    at = [
        int(line.rsplit("at step ", 1)[1].split()[0]) for line in text.splitlines() if "resumed from" in line
    ]
    redone_from = at[-1] if at else 0
    # Steps the killed run had begun and the resumed one ran again: those it logged after its last complete
    # checkpoint, and the one the kill cut short.
    row.retried = min(steps, max(before, default=0) + 1) - redone_from
    step_counts(row, after, steps)
    reused = episode_counts(row, runs / "job", steps, jobs=2 * 4)
    row.note = (
        f"killed after step {max(before, default=0)} was logged; resumed at step {redone_from}; "
        f"{reused} journaled episodes reused"
    )
    return row


def episode_counts(row: FaultRow, run_dir: Path, steps: int, *, jobs: int) -> int:
    """Exactly once at the episode level, from the run's journal: every job of every step journaled and in its
    step's batch once (a missing one is lost, a second one duplicated). Returns the episodes the resumed run
    took from the journal."""
    from rllm.store.journal import EpisodeJournal

    reused = 0
    with EpisodeJournal(run_dir / "journal.db") as journal:
        for step in range(steps):
            keys = set(journal.episodes(step))
            batch = journal.batch(step) or {"keys": []}
            row.lost += sum(f"r0:{j}" not in keys for j in range(jobs))
            trained = Counter(batch["keys"])
            row.lost += sum(f"r0:{j}" not in trained for j in range(jobs))
            row.duplicated += sum(n - 1 for n in trained.values())
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        reused += int(json.loads(line).get("rollout/reused_episodes", 0))
    return reused


def all_faults_training(
    work: Path, overrides: list[str], *, steps: int, upstream_timeout_s: float, timeout_s: float = 600.0
) -> tuple[FaultRow, dict[str, Any]]:
    """The default task trained under faults 1-4 at once; counts from the run's files and its trace store."""
    row = FaultRow("all faults at once (training run)")
    runs, log = work / "all", work / "all.log"
    proc = _job(
        runs,
        "run",
        [
            "--faults",
            f"--upstream-timeout-s={upstream_timeout_s}",
            *overrides,
            f"trainer.steps={steps}",
            "rollout.retries=1",
        ],
        log,
        timeout_s,
    )
    try:
        code = proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise RuntimeError(f"the run did not finish in {timeout_s:g} s:\n{log.read_text()[-3000:]}") from None
    if code != 0:
        raise RuntimeError(f"the run failed ({code}):\n{log.read_text()[-3000:]}")
    run_dir = runs / "run"
    faults = json.loads((run_dir / "faults.json").read_text())
    result = json.loads((run_dir / "result.json").read_text())
    row.injected = sum(faults[k] for k in ("upstream_500", "upstream_hung", "agent_raised", "tool_raised"))
    row.retried = faults["upstream_retried"]
    row.failed = faults["tool_raised"]  # each recorded in its tool result (the model reads the error)
    row.reasons["tool exception: injected tool fault"] = faults["tool_raised"]
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        m = json.loads(line)
        # rollout/ episode counts: failed episodes (agent raised twice) are recorded with their reason
        row.failed += int(m.get("episodes/failed", 0))
    acknowledged = [json.loads(x) for x in (run_dir / "acknowledged.jsonl").read_text().splitlines() if x]
    with TraceStore(run_dir / "traces.db") as store:
        rows = store.query(TraceQuery(limit=10_000))
        while len(rows) % 10_000 == 0 and rows:
            more = store.query(TraceQuery(limit=10_000, after_seq=rows[-1][0]))
            if not more:
                break
            rows += more
    per_request = Counter((t.request_id, t.choice_index) for _, t in rows)
    row.duplicated += sum(n - 1 for n in per_request.values() if n > 1)
    stored = {rid for rid, _ in per_request}
    row.lost += sum(a["id"] not in stored for a in acknowledged)
    ids = Counter(a["id"] for a in acknowledged)
    row.duplicated += sum(n - 1 for n in ids.values() if n > 1)
    step_counts(row, logged_steps(run_dir), steps)
    row.note = f"{len(acknowledged)} calls acknowledged, {len(rows)} trace rows; {faults}"
    return row, result


# ---------------------------------------------------------------------------------------------------------
# 5. A vLLM server killed mid-step (tests/vllm_pool/test_vllm_pool.py's approach): two real vLLM servers
# behind the pool's gateway, 24 sessions decoding, one server's process group SIGKILLed.


def vllm_killed(work: Path, model_dir: str, *, sessions: int = 24) -> FaultRow:
    from rllm.trainer.config import TrainConfig  # the pool's config: only this fault needs it
    from rllm.trainer.vllm_pool import VLLMPoolEngine  # aiohttp, transformers: only this fault needs them
    from rllm.utils.config import load_config

    row = FaultRow("vLLM server killed mid-step")
    cfg = load_config(
        TrainConfig,
        None,
        [f"model.path={model_dir}", "inference.engine=vllm", "inference.vllm.num_servers=2",
         "inference.vllm.kvcache_space_gib=1", "backend.device=cpu"],
    )  # fmt: skip
    pool = VLLMPoolEngine.from_config(
        cfg, model_dir, trace_store_path=work / "vllm.db", sync_dir=work / "sync", log_dir=work / "vllm_logs"
    )
    with pool:
        assert pool._upstream is not None and pool.trace_store is not None
        workers = pool._upstream.workers

        async def run() -> list[Any]:
            calls = [
                asyncio.ensure_future(
                    pool.generate(
                        pool.apply_chat_template([{"role": "user", "content": f"A story about {i}."}]),
                        SamplingParams(max_tokens=48, temperature=1.0, seed=i, ignore_eos=True),
                        session_id=f"kill-{i}",
                    )
                )
                for i in range(sessions)
            ]
            while not all(w.inflight > 0 for w in workers):
                await asyncio.sleep(0.05)
            await asyncio.sleep(1.0)  # both servers are decoding
            row.injected = workers[1].inflight  # calls the kill cuts
            os.killpg(pool.server_pgids()[1], signal.SIGKILL)
            return list(await asyncio.gather(*calls, return_exceptions=True))

        results = asyncio.run(run())
        for r in results:
            if isinstance(r, BaseException):
                row.failed += 1
                row.reasons[f"{type(r).__name__}: {_short(str(r))}"] += 1
        row.retried = pool._upstream.retried
        per_session = [len(pool.trace_store.list(f"kill-{i}")) for i in range(sessions)]
        ok = [not isinstance(r, BaseException) for r in results]
        row.lost = sum(1 for good, n in zip(ok, per_session) if good and n == 0)
        row.duplicated = sum(n - 1 for n in per_session if n > 1)
        row.note = f"{sessions} sessions, {pool._upstream.rerouted} re-routed"
    return row
