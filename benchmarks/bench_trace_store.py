"""How many traces per second one SQLite trace store takes, from 1, 2 or 4 writer processes at once (the
workers of a multi-process gateway share one store), with fsync off (``synchronous=NORMAL``, the
default) and on (``synchronous=FULL``, ``--fsync``).

Each writer is its own process calling :meth:`TraceStore.add` in a closed loop, one trace per
transaction (what the gateway does for every ``n=1`` call), for ``--duration`` seconds after all writers
are ready. A trace is the size of a realistic training call (``--prompt-tokens`` 512 prompt ids,
``--completion-tokens`` 256 completion ids and logprobs, a two-message request: about 12 KB as stored).
Reported: traces/s over all writers, the bytes/s that makes, each add's p50/p99 latency and the part
of it that is JSON encoding (outside SQLite's write lock; the rest is the serial part, one writer at a
time), and a check that the store holds exactly the traces the writers acknowledged.

    .venv/bin/python benchmarks/bench_trace_store.py             # 1,2,4 writers x fsync off/on, 3 s each
    .venv/bin/python benchmarks/bench_trace_store.py --quick     # plumbing check: 1,2 writers, 0.5 s
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import header_line, markdown_table

from rllm.gateway.traces import Trace, TraceStore, _to_row


def make_trace(writer: int, i: int, prompt_tokens: int, completion_tokens: int, rng: random.Random) -> Trace:
    return Trace(
        session_id=f"w{writer}-s{i % 64}",
        request_id=f"w{writer}-r{i}",
        endpoint="chat.completions",
        request={
            "messages": [
                {"role": "system", "content": "You are a helpful assistant. " * 4},
                {"role": "user", "content": "Natalia sold clips to 48 of her friends in April. " * 6},
            ],
            "tools": None,
            "tool_choice": None,
            "sampling_params": {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "max_tokens": 512, "seed": i},
        },
        response_text="The answer is " + "x" * (completion_tokens * 3),
        response_message={"role": "assistant", "content": "The answer is ...", "tool_calls": None},
        prompt_token_ids=[rng.randrange(151_000) for _ in range(prompt_tokens)],
        completion_token_ids=[rng.randrange(151_000) for _ in range(completion_tokens)],
        logprobs=[-rng.random() * 5 for _ in range(completion_tokens)],
        finish_reason="stop",
        latency_ms=812.5,
        weight_version=3,
        upstream="http://10.0.0.5:8001/v1",
    )


def writer_main(args: argparse.Namespace) -> None:
    rng = random.Random(args.writer)
    # Built before the clock starts: the writer measures the store, not pydantic.
    traces = [make_trace(args.writer, i, args.prompt_tokens, args.completion_tokens, rng) for i in range(64)]
    store = TraceStore(args.store, fsync=args.fsync_on)
    go = Path(args.go)
    Path(args.ready).touch()
    while not go.exists():
        time.sleep(0.001)
    latencies, n = [], 0
    start = time.perf_counter()
    end = start + args.duration
    while True:
        t = traces[n % len(traces)].model_copy(update={"trace_id": f"w{args.writer}-{n}"})
        t0 = time.perf_counter()
        store.add(t)
        t1 = time.perf_counter()
        latencies.append(t1 - t0)
        n += 1
        if t1 >= end:
            break
    elapsed_s = time.perf_counter() - start
    store.close()
    # The JSON encoding of a trace (done by each writer before it takes the write lock), timed apart: the
    # rest of a commit's latency is SQLite's, the part writers of one file do one at a time.
    encode = []
    for t in traces:
        t0 = time.perf_counter()
        _to_row(t)
        encode.append(time.perf_counter() - t0)
    latencies.sort()
    encode.sort()
    Path(args.result_file).write_text(
        json.dumps(
            {
                "encode_ms": encode[len(encode) // 2] * 1e3,
                "traces": n,
                "elapsed_s": elapsed_s,
                "p50_ms": latencies[len(latencies) // 2] * 1e3,
                "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1e3,
            }
        )
    )


def run_point(args: argparse.Namespace, tmp: Path, writers: int, fsync: bool) -> dict[str, Any]:
    point = tmp / f"w{writers}-fsync{int(fsync)}"
    point.mkdir()
    store, go = point / "traces.db", point / "go"
    TraceStore(store).close()
    procs, results = [], []
    for w in range(writers):
        cmd = [
            sys.executable,
            __file__,
            "--writer",
            str(w),
            "--store",
            str(store),
            "--go",
            str(go),
            "--ready",
            str(point / f"ready{w}"),
            "--result-file",
            str(point / f"result{w}.json"),
            "--duration",
            str(args.duration),
            "--prompt-tokens",
            str(args.prompt_tokens),
            "--completion-tokens",
            str(args.completion_tokens),
            *(["--fsync-on"] if fsync else []),
        ]
        procs.append(subprocess.Popen(cmd))
    try:
        deadline = time.monotonic() + 120
        while not all((point / f"ready{w}").exists() for w in range(writers)):
            if any(p.poll() not in (None, 0) for p in procs) or time.monotonic() > deadline:
                raise RuntimeError("a trace-store writer failed to start")
            time.sleep(0.01)
        go.touch()
        for p in procs:
            if p.wait(timeout=args.duration + 120) != 0:
                raise RuntimeError(f"a trace-store writer exited with status {p.returncode}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    results = [json.loads((point / f"result{w}.json").read_text()) for w in range(writers)]
    with sqlite3.connect(store) as conn:
        stored, total_bytes = conn.execute(
            "SELECT COUNT(*), SUM(length(request) + length(response_text) + length(response_message) + "
            "length(prompt_token_ids) + length(completion_token_ids) + length(logprobs)) FROM traces"
        ).fetchone()
    written = sum(r["traces"] for r in results)
    wall_s = max(r["elapsed_s"] for r in results)  # each writer's own loop: not its start-up or exit
    shutil.rmtree(point, ignore_errors=True)
    return {
        "writers": writers,
        "fsync": fsync,
        "traces": written,
        "wall_s": wall_s,
        "traces_per_s": written / wall_s,
        "bytes_per_trace": total_bytes / max(stored, 1),
        "mb_per_s": total_bytes / wall_s / 1e6,
        "p50_ms": max(r["p50_ms"] for r in results),
        "p99_ms": max(r["p99_ms"] for r in results),
        "encode_ms": max(r["encode_ms"] for r in results),
        "stored": stored,
        "ok": stored == written,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--writers", default="1,2,4", help="comma-separated writer-process counts (default: 1,2,4)"
    )
    p.add_argument("--fsync", choices=["both", "off", "on"], default="both")
    p.add_argument("--duration", type=float, default=3.0, help="seconds per point (default: 3)")
    p.add_argument("--prompt-tokens", type=int, default=512)
    p.add_argument("--completion-tokens", type=int, default=256)
    p.add_argument("--store-dir", metavar="DIR", help="where the stores go (default: the temp dir)")
    p.add_argument("--quick", action="store_true", help="plumbing check: 1,2 writers, 0.5 s per point")
    p.add_argument("--json", metavar="PATH")
    # internal: one writer process
    p.add_argument("--writer", type=int, help=argparse.SUPPRESS)
    p.add_argument("--store", help=argparse.SUPPRESS)
    p.add_argument("--go", help=argparse.SUPPRESS)
    p.add_argument("--ready", help=argparse.SUPPRESS)
    p.add_argument("--result-file", help=argparse.SUPPRESS)
    p.add_argument("--fsync-on", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.writer is not None:
        writer_main(args)
        return 0
    if args.quick:
        args.writers, args.duration = "1,2", 0.5
    tmp = Path(tempfile.mkdtemp(prefix="rllm-bench-store-", dir=args.store_dir))
    points = []
    try:
        for fsync in {"both": [False, True], "off": [False], "on": [True]}[args.fsync]:
            for w in (int(x) for x in args.writers.split(",")):
                r = run_point(args, tmp, w, fsync)
                points.append(r)
                print(
                    f"  {w} writer(s), fsync {'on' if fsync else 'off'}: {r['traces_per_s']:8.0f} traces/s "
                    f"({r['mb_per_s']:.1f} MB/s), commit p50 {r['p50_ms']:.2f} ms p99 {r['p99_ms']:.2f} ms",
                    flush=True,
                )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(
        f"\n**Trace store: closed-loop TraceStore.add from N writer processes into one SQLite file (WAL), "
        f"{args.duration:g} s per point, {args.prompt_tokens} prompt + {args.completion_tokens} completion tokens "
        "per trace**"
    )
    print(header_line())
    print(
        f"stores under {tmp.parent}; add p50/p99 (one TraceStore.add: JSON encoding + insert + commit) and JSON "
        "encode (its first part, outside SQLite's write lock): the slowest writer's"
    )
    rows = [
        [
            str(r["writers"]),
            "on" if r["fsync"] else "off",
            f"{r['traces_per_s']:,.0f}",
            f"{r['mb_per_s']:.1f}",
            f"{r['bytes_per_trace'] / 1000:.1f}",
            f"{r['encode_ms']:.2f}",
            f"{r['p50_ms']:.2f}",
            f"{r['p99_ms']:.2f}",
            f"{r['stored']} / {r['traces']}",
        ]
        for r in points
    ]
    print(
        markdown_table(
            [
                "writer processes",
                "fsync",
                "traces/s",
                "MB/s",
                "kB/trace",
                "JSON encode ms",
                "add p50 ms",
                "add p99 ms",
                "stored / acknowledged",
            ],
            rows,
        )
    )
    if args.json:
        Path(args.json).write_text(json.dumps({"points": points, "header": header_line()}, indent=2))
    return 0 if all(r["ok"] for r in points) else 1


if __name__ == "__main__":
    sys.exit(main())
