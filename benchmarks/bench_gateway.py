"""Gateway overhead: direct calls to an upstream vs rllm's gateway vs the LiteLLM proxy, same upstream.

Four paths are measured in one run, on loopback, against the same FAKE upstream (a tiny OpenAI-compatible
server answering in vLLM's token-id dialect in microseconds, so the proxies, not the model, are measured):

- ``direct``: the client calls the fake upstream itself;
- ``rllm-gateway xN (fsync off)`` and ``rllm-gateway xN (fsync on)``, for each N of ``--workers``
  (default ``1,2,4``): a gateway of N worker processes (``rllm.gateway.pool.GatewayProcesses``, what
  ``rllm gateway --workers N --upstream-kind vllm`` runs; N=1 is one process, as ``rllm gateway``) in front
  of it, the N workers sharing one trace store, each gateway its own store; each client worker on its own
  session URL ``/sessions/{id}/v1/chat/completions`` of the worker ``rllm.gateway.pool.route`` picks for
  that session; every call asks the upstream for token ids and logprobs and is committed to the SQLite
  trace store (WAL) before the reply goes out. fsync off (the default, ``synchronous=NORMAL``): a trace
  survives a killed gateway, not power loss; fsync on (``--fsync``, ``synchronous=FULL``): it survives
  power loss too;
- ``litellm``: the LiteLLM proxy (its own venv ``.venv-bench-litellm``, one worker, no database, telemetry
  off), with ``openai/<model>`` routed to the fake upstream.

For each concurrency (``--concurrency``, default ``1,64,256``) a closed-loop load generator runs that many
workers, each on its own keep-alive connection, sending the next request when the previous one returns,
for ``--warmup`` then ``--duration`` seconds. Each concurrency gets its own table: requests/s, p50/p99
latency, and the *added* latency of each proxy (its percentile minus the direct path's at the same
concurrency), then the targets that apply at that concurrency, judged on its numbers only: added p50
<= 1 ms at 1 session; >= 1,500 req/s at 256 sessions with durable traces (the fsync-on row; the fsync-off
row is judged beside it, labelled as not power-loss durable). Every server and the load generator run in
their own processes (uvloop); on a small machine they compete for the same cores, which the output says
next to the CPU each one used. Afterwards each gateway's trace store must hold exactly one trace per
request answered through it.

    .venv/bin/python benchmarks/bench_gateway.py                         # every path, 1/64/256 sessions
    .venv/bin/python benchmarks/bench_gateway.py --quick                 # plumbing check: 1/4 sessions, 1 s, x1/x2
    .venv/bin/python benchmarks/bench_gateway.py --fsync off --skip-litellm --workers 1,2,4  # the scale-out
    .venv/bin/python benchmarks/bench_gateway.py --json /tmp/gateway-bench.json

LiteLLM setup (never into .venv: it pins its own versions of shared packages): ``scripts/setup_bench.sh``.
Without it, or with ``--skip-litellm``, the other paths still run and the output says why LiteLLM is
missing (``--require-litellm`` makes that an error). ``--fsync off|on`` runs one gateway only;
``--store-dir /dev/shm`` puts the trace stores on tmpfs.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import os
import platform
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from _common import header_line, markdown_table
from _gateway_load import COMPLETION_TOKENS, MODEL, run_fake_upstream, run_loadgen

from rllm.gateway.pool import GatewayProcesses

ROOT = Path(__file__).resolve().parent.parent
LITELLM_VENV = ROOT / ".venv-bench-litellm"
TARGET_ADDED_P50_MS = 1.0  # at 1 session
TARGET_THROUGHPUT_RPS = 1_500  # at TARGET_THROUGHPUT_SESSIONS, with durable (fsync-on) traces
TARGET_THROUGHPUT_SESSIONS = 256


# ---------------------------------------------------------------------------------------------------------
# The orchestrator: start the servers, run every (concurrency, path) point, check traces, print.


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, proc: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the process serving {url} exited with status {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer 200 within {timeout_s:.0f} s")


def tail(path: Path, n: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


class Servers:
    """The subprocesses of one run, each in its own process group; ``close`` ends every group it started."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, cmd: list[str], env: dict[str, str | None] | None = None) -> subprocess.Popen:
        """Start ``cmd`` with ``env`` on top of ours (a None value unsets that variable); output to a log."""
        full = {**os.environ, **(env or {})}
        log = open(self.tmp / f"{name}.log", "wb")  # noqa: SIM115 (the child owns it)
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={k: v for k, v in full.items() if v is not None},
            cwd=self.tmp,
        )
        log.close()
        self.procs[name] = proc
        return proc

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def start_litellm(servers: Servers, upstream_port: int) -> tuple[int | None, str]:
    """Start the LiteLLM proxy; return (port, version) or (None, why it is missing)."""
    exe = LITELLM_VENV / "bin" / "litellm"
    if not exe.is_file():
        return None, (
            f"not installed: {exe} is missing (python3 -m venv {LITELLM_VENV.name} && "
            f"{LITELLM_VENV.name}/bin/pip install 'litellm[proxy]')"
        )
    # uvicorn serves it with httptools when that is installed (as for the gateway), else with the slower h11.
    probe = (
        "import importlib.metadata as m, importlib.util as u; "
        "print(m.version('litellm'), 'httptools' if u.find_spec('httptools') else 'h11')"
    )
    try:
        version, parser = subprocess.run(
            [str(LITELLM_VENV / "bin" / "python"), "-c", probe],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout.split()
    except (subprocess.SubprocessError, OSError, ValueError) as exc:
        return None, f"its venv {LITELLM_VENV} is broken: {exc}"
    version = f"{version} (uvicorn with {parser})"
    config = servers.tmp / "litellm.yaml"
    config.write_text(
        "model_list:\n"
        f"  - model_name: {MODEL}\n"
        "    litellm_params:\n"
        f"      model: openai/{MODEL}\n"
        f"      api_base: http://127.0.0.1:{upstream_port}/v1\n"
        "      api_key: x\n"
        "litellm_settings:\n"
        "  set_verbose: false\n"
        "  drop_params: true\n"
        "general_settings:\n"
        "  disable_spend_logs: true\n"
        "  disable_error_logs: true\n"
    )
    port = free_port()
    # No database (so no spend logs), no API key (like the gateway here; loopback only), telemetry vetoed,
    # the bundled model-cost map instead of a download at start-up, warnings only.
    env = {
        "LITELLM_TELEMETRY_DISABLED": "true",
        "LITELLM_LOG": "WARNING",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY": "true",
        "DISABLE_ADMIN_UI": "True",
        "DATABASE_URL": None,
        "LITELLM_MASTER_KEY": None,
    }
    proc = servers.start(
        "litellm",
        [str(exe), "--config", str(config), "--host", "127.0.0.1", "--port", str(port), "--num_workers", "1"],
        env,
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/health/liveliness", proc, timeout_s=180)
    except RuntimeError as exc:
        return None, f"litellm {version} did not start: {exc}\n{tail(servers.tmp / 'litellm.log')}"
    return port, version


def run_point(
    args: argparse.Namespace,
    ports: list[int],
    path: str,
    sessions: int,
    prefix: str,
    watch: dict[str, list[int]],
) -> dict[str, Any]:
    result_file = Path(tempfile.mkstemp(prefix="rllm-bench-gw-", suffix=".json")[1])
    cmd = [
        sys.executable,
        __file__,
        "--loadgen",
        "--ports",
        ",".join(map(str, ports)),
        "--path",
        path,
        "--sessions",
        str(sessions),
        "--session-prefix",
        prefix,
        "--warmup",
        str(args.warmup),
        "--duration",
        str(args.duration),
        "--watch",
        ",".join(f"{k}={'+'.join(map(str, v))}" for k, v in watch.items()),
        "--result-file",
        str(result_file),
    ]
    try:
        subprocess.run(cmd, check=True, timeout=args.warmup + args.duration + 120)
        return json.loads(result_file.read_text())
    finally:
        result_file.unlink(missing_ok=True)


def commit_latency_ms(directory: Path, commits: int = 50) -> float:
    """Median time of one small SQLite commit in WAL mode with ``synchronous=FULL`` (what the trace store
    does per call) in ``directory``: the floor the gateway's durable write puts under its added latency."""
    db = directory / "commit-probe.db"
    conn = sqlite3.connect(db)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("CREATE TABLE t (x TEXT)")
        times = []
        for _ in range(commits):
            t0 = time.perf_counter()
            with conn:
                conn.execute("INSERT INTO t VALUES (?)", ("x" * 2000,))
            times.append(time.perf_counter() - t0)
    finally:
        conn.close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
    return sorted(times)[len(times) // 2] * 1e3


def count_traces(db: Path) -> tuple[int, int]:
    with sqlite3.connect(db) as conn:
        total, trainable = conn.execute("SELECT COUNT(*), COALESCE(SUM(trainable), 0) FROM traces").fetchone()
    return total, trainable


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in ("rllm", "uvicorn", "starlette", "aiohttp", "uvloop", "httptools"):
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            out[pkg] = "?"
    return out


def fmt(x: float | None, digits: int = 2) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def gateway_path(fsync: bool, workers: int = 1) -> str:
    """The name of the row of a gateway of ``workers`` processes with the trace store's fsync on or off."""
    return f"rllm-gateway x{workers} (fsync {'on' if fsync else 'off'})"


def durability(name: str) -> str:
    if name.startswith("rllm-gateway"):
        return "survives power loss" if name.endswith("(fsync on)") else "survives a killed gateway"
    return {"direct": "-", "litellm": "no traces"}[name]


def target_lines(c: int, points: dict[str, Any]) -> list[str]:
    """The targets that apply at concurrency ``c``, judged on that concurrency's numbers only: added p50
    <= 1 ms at 1 session; >= 1,500 req/s at 256 sessions with durable traces, where durable means the
    fsync-on row (a WAL commit without fsync survives a killed gateway but not power loss; that row is
    judged too, and labelled so)."""
    out = []
    direct = points.get("direct")
    gateways = [(name, r) for name, r in points.items() if name.startswith("rllm-gateway")]
    if c == 1:
        for name, r in gateways:
            if direct is None:
                out.append(f"- {name}: added p50 not measured (no direct path)")
                continue
            added = r["p50_ms"] - direct["p50_ms"]
            verdict = "PASS" if added <= TARGET_ADDED_P50_MS else "FAIL"
            out.append(
                f"- {name}: added p50 {added:+.2f} ms at 1 session (target <= {TARGET_ADDED_P50_MS:g} ms): "
                f"{verdict}"
            )
    if c == TARGET_THROUGHPUT_SESSIONS:
        for name, r in gateways:
            verdict = "PASS" if r["requests_per_s"] >= TARGET_THROUGHPUT_RPS else "FAIL"
            which = (
                "the durable row: the target"
                if name.endswith("(fsync on)")
                else "not power-loss durable: for reference, not the target"
            )
            out.append(
                f"- {name}: {r['requests_per_s']:,.0f} req/s at {c} sessions (target >= "
                f"{TARGET_THROUGHPUT_RPS:,} req/s with durable traces; {which}): {verdict}"
            )
    return out or [f"- no target is set at {c} session(s)"]


def report(results: dict[str, Any]) -> str:
    """One table per concurrency, then that concurrency's targets: every number on a line comes from
    the same concurrency (added latency = this path's percentile minus the direct path's, same point)."""
    lines = []
    for c in results["concurrency"]:
        points = results["points"][str(c)]
        direct, litellm = points.get("direct"), points.get("litellm")
        rows = []
        for name in results["paths"]:
            r = points.get(name)
            if r is None:
                continue
            add50 = r["p50_ms"] - direct["p50_ms"] if direct and name != "direct" else None
            add99 = r["p99_ms"] - direct["p99_ms"] if direct and name != "direct" else None
            proxy = "gateway" if name.startswith("rllm-gateway") else "litellm" if name == "litellm" else None
            vs_litellm = (
                r["requests_per_s"] / litellm["requests_per_s"]
                if litellm and litellm["requests_per_s"] > 0 and name.startswith("rllm-gateway")
                else None
            )
            cpu = r["cpu_cores"]
            rows.append(
                [
                    name,
                    durability(name),
                    fmt(r["requests_per_s"], 0),
                    fmt(r["p50_ms"]),
                    fmt(r["p99_ms"]),
                    fmt(add50),
                    fmt(add99),
                    f"{vs_litellm:.1f}x" if vs_litellm else "-",
                    fmt(r["cpu_ms_per_request"][proxy], 3) if proxy else "-",
                    f"{cpu['loadgen'] * 100:.0f} / {cpu['upstream'] * 100:.0f} / "
                    + (f"{cpu[proxy] * 100:.0f}" if proxy else "-"),
                    str(r["errors_total"]),
                ]
            )
        lines += [
            f"\n**{c} concurrent session(s)**\n",
            markdown_table(
                [
                    "path",
                    "traces",
                    "req/s",
                    "p50 ms",
                    "p99 ms",
                    "added p50 ms",
                    "added p99 ms",
                    "req/s vs LiteLLM",
                    "proxy CPU ms/req",
                    "CPU % loadgen / upstream / proxy",
                    "errors",
                ],
                rows,
            ),
            f"\ntargets at {c} session(s):",
            *target_lines(c, points),
        ]
    return "\n".join(lines)


def scaling_report(results: dict[str, Any], fsync_modes: list[bool]) -> str:
    """Requests/s of each gateway size at each concurrency, and its ratio to the one-process gateway."""
    counts = results["workers"]
    lines = ["\n**Scale-out: req/s by gateway worker processes (ratio to x1 at the same concurrency)**\n"]
    rows = []
    for fsync in fsync_modes:
        for c in results["concurrency"]:
            points = results["points"][str(c)]
            base = points.get(gateway_path(fsync, 1), {}).get("requests_per_s")
            cells = []
            for n in counts:
                rps = points[gateway_path(fsync, n)]["requests_per_s"]
                cells.append(f"{rps:,.0f}" + (f" ({rps / base:.2f}x)" if base else ""))
            rows.append([f"fsync {'on' if fsync else 'off'}", str(c), *cells])
    lines.append(markdown_table(["trace store", "sessions", *[f"x{n} req/s" for n in counts]], rows))
    return "\n".join(lines)


def start_gateway(tmp: Path, up_port: int, db: Path, fsync: bool, workers: int) -> GatewayProcesses:
    """A gateway of ``workers`` processes over the fake upstream, recording into ``db``: the same
    processes ``rllm gateway --workers N --upstream-kind vllm`` starts."""
    return GatewayProcesses(
        workers,
        model=MODEL,
        store_path=db,
        upstreams=[f"http://127.0.0.1:{up_port}/v1"],
        upstream_kind="vllm",
        fsync=fsync,
        log_dir=tmp / f"gateway-x{workers}-fsync-{fsync}",
        start_timeout_s=120,
    ).start()


def orchestrate(args: argparse.Namespace) -> int:
    concurrency = [int(c) for c in args.concurrency.split(",")]
    fsync_modes = {"both": [False, True], "off": [False], "on": [True]}[args.fsync]
    worker_counts = [int(n) for n in args.workers.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="rllm-bench-gateway-"))
    servers = Servers(tmp)
    gateways: list[GatewayProcesses] = []
    store_dir: Path | None = None
    results: dict[str, Any] = {
        "concurrency": concurrency,
        "workers": worker_counts,
        "duration_s": args.duration,
        "warmup_s": args.warmup,
        "points": {},
        "versions": versions(),
        "header": header_line(),
        "load_average_start": os.getloadavg()[0],
    }
    try:
        up_port = free_port()
        up = servers.start(
            "fake-upstream",
            [
                sys.executable,
                __file__,
                "--fake-upstream",
                "--port",
                str(up_port),
                "--completion-tokens",
                str(args.completion_tokens),
            ],
        )
        wait_http(f"http://127.0.0.1:{up_port}/health", up, timeout_s=30)
        store_dir = Path(tempfile.mkdtemp(prefix="rllm-bench-store-", dir=args.store_dir))
        results["store_dir"] = str(store_dir)
        results["commit_ms"] = commit_latency_ms(store_dir)
        paths: dict[str, tuple[list[int], str, dict[str, list[int]]]] = {
            "direct": ([up_port], "/v1/chat/completions", {"upstream": [up.pid]}),
        }
        stores: dict[str, Path] = {}
        for fsync in fsync_modes:
            for n in worker_counts:
                name = gateway_path(fsync, n)
                stores[name] = store_dir / f"traces-x{n}-fsync-{'on' if fsync else 'off'}.db"
                gw = start_gateway(tmp, up_port, stores[name], fsync, n)
                gateways.append(gw)
                ports = [int(u.rsplit(":", 1)[1]) for u in gw.urls]
                paths[name] = (
                    ports,
                    "/sessions/{session}/v1/chat/completions",
                    {"upstream": [up.pid], "gateway": gw.pids},
                )
                print(f"{name}: pids {gw.pids} ports {ports}, store {stores[name]}", flush=True)
        ll_port, ll_info = (
            (None, "skipped (--skip-litellm)") if args.skip_litellm else start_litellm(servers, up_port)
        )
        results["litellm"] = ll_info
        if ll_port is None:
            print(f"LiteLLM is MISSING from this run: {ll_info}", flush=True)
            if args.require_litellm:
                raise RuntimeError(
                    f"--require-litellm: LiteLLM did not run ({ll_info}); run scripts/setup_bench.sh"
                )
        else:
            paths["litellm"] = (
                [ll_port],
                "/v1/chat/completions",
                {"upstream": [up.pid], "litellm": [servers.procs["litellm"].pid]},
            )
        print(
            f"fake upstream pid {up.pid} :{up_port}"
            + (f", litellm pid {servers.procs['litellm'].pid} :{ll_port} ({ll_info})" if ll_port else ""),
            flush=True,
        )
        results["paths"] = list(paths)
        answered = dict.fromkeys(stores, 0)
        for c in concurrency:
            results["points"][str(c)] = {}
            for name, (ports, path, watch) in paths.items():
                r = run_point(args, ports, path, c, f"bench-c{c}", watch)
                results["points"][str(c)][name] = r
                if name in answered:
                    answered[name] += r["answered_total"]
                print(
                    f"  {c:>4} sessions  {name:<26} {r['requests_per_s']:8.0f} req/s  p50 {r['p50_ms']:7.2f} ms  "
                    f"p99 {r['p99_ms']:7.2f} ms  errors {r['errors_total']}"
                    + (f"  first error: {r['first_error']}" if r["first_error"] else ""),
                    flush=True,
                )
        results["trace_check"] = {}
        for name, db in stores.items():
            traces, trainable = count_traces(db)
            results["trace_check"][name] = {
                "traces": traces,
                "trainable": trainable,
                "answered": answered[name],
                "ok": traces == answered[name] == trainable,
            }
        sample = results["points"][str(concurrency[0])][gateway_path(fsync_modes[0], worker_counts[0])][
            "first_reply"
        ]
        results["load_average_end"] = os.getloadavg()[0]
    finally:
        for gw in gateways:
            gw.stop()
        servers.close()
        if store_dir is not None:
            shutil.rmtree(store_dir, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)
    v = results["versions"]
    print(
        f"\n**Gateway overhead: closed-loop chat completions against a FAKE upstream "
        f"({args.completion_tokens} completion tokens), {args.warmup:g} s warm-up + {args.duration:g} s per point**"
    )
    print(results["header"])
    print(
        f"python {v['python']}, rllm {v['rllm']}, uvicorn {v['uvicorn']}, starlette {v['starlette']}, "
        f"aiohttp {v.get('aiohttp', '?')}, uvloop {v['uvloop']}; litellm: {results['litellm']}; "
        f"load average {results['load_average_start']:.2f} at start, {results['load_average_end']:.2f} at end"
    )
    print(
        "note: load generator, fake upstream and proxy share the cores (CPU % below is of one core); added "
        "latency = path percentile minus direct percentile at the same concurrency; each gateway asks the "
        "upstream for token ids + logprobs and commits each trace (SQLite WAL) before replying; fsync on: "
        "synchronous=FULL, every commit fsynced (survives power loss); fsync off: the default, "
        "synchronous=NORMAL (survives a killed gateway, not power loss)"
    )
    print(
        f"trace stores under {results['store_dir']}; one SQLite WAL commit with synchronous=FULL there takes "
        f"{results['commit_ms']:.2f} ms (median of 50): the floor under the fsync-on gateway's added latency"
    )
    print(report(results))
    print(scaling_report(results, fsync_modes))
    ok = True
    print()
    for name, tc in results["trace_check"].items():
        ok &= tc["ok"]
        print(
            f"trace check, {name}: {tc['traces']} traces stored ({tc['trainable']} trainable) for {tc['answered']} "
            f"requests it answered: {'OK' if tc['ok'] else 'MISMATCH'}"
        )
    print(f"sample gateway reply: {sample[:200]}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
        print(f"results written to {args.json}")
    return 0 if ok else 1


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--duration", type=float, default=5.0, help="measured seconds per point (default: 5)")
    p.add_argument(
        "--warmup", type=float, default=1.0, help="unmeasured seconds before each point (default: 1)"
    )
    p.add_argument(
        "--concurrency", default="1,64,256", help="comma-separated concurrent sessions (default: 1,64,256)"
    )
    p.add_argument(
        "--fsync",
        choices=["both", "off", "on"],
        default="both",
        help="the gateway's trace-store fsync: both (default: two gateways, one row each), off, on",
    )
    p.add_argument(
        "--gateway-fsync",
        action="store_const",
        const="on",
        dest="fsync",
        help="the same as --fsync on (kept for older commands)",
    )
    p.add_argument(
        "--workers",
        default="1,2,4",
        help="comma-separated gateway worker-process counts, one gateway (and one row) each (default: 1,2,4)",
    )
    p.add_argument(
        "--completion-tokens",
        type=int,
        default=COMPLETION_TOKENS,
        help=f"tokens (ids + logprobs) in each fake reply, so in each trace (default: {COMPLETION_TOKENS})",
    )
    p.add_argument("--skip-litellm", action="store_true", help="measure direct and the gateway only")
    p.add_argument(
        "--require-litellm",
        action="store_true",
        help="fail when LiteLLM cannot run (CI: scripts/setup_bench.sh installs it)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="plumbing check (about a minute): 1 and 4 sessions, gateways of 1 and 2 workers, 0.5 s "
        "warm-up + 1 s per point",
    )
    p.add_argument("--json", metavar="PATH", help="also write every number to PATH")
    p.add_argument(
        "--store-dir",
        metavar="DIR",
        help="where the gateway's trace stores go (default: the temp "
        "dir); e.g. /dev/shm to see the gateway without the cost of fsync",
    )
    # internal: the child processes this script spawns
    p.add_argument("--fake-upstream", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--loadgen", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    p.add_argument("--ports", help=argparse.SUPPRESS)
    p.add_argument("--path", help=argparse.SUPPRESS)
    p.add_argument("--sessions", type=int, help=argparse.SUPPRESS)
    p.add_argument("--session-prefix", default="bench", help=argparse.SUPPRESS)
    p.add_argument("--watch", default="", help=argparse.SUPPRESS)
    p.add_argument("--result-file", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.quick:
        args.concurrency, args.warmup, args.duration, args.workers = "1,4", 0.5, 1.0, "1,2"
    return args


def main() -> int:
    args = parse_args()
    if args.fake_upstream:
        run_fake_upstream(args.port, args.completion_tokens)
        return 0
    if args.loadgen:
        run_loadgen(args)
        return 0
    return orchestrate(args)


if __name__ == "__main__":
    sys.exit(main())
