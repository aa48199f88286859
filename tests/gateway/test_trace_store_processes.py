"""One SQLite trace store written by several processes at once (the workers of GatewayProcesses): every
trace is stored exactly once, in a consistent seq order, and creating the same session from several
processes at once lets exactly one of them win."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from rllm.gateway.traces import TraceQuery, TraceStore

WRITERS = 4
TRACES_PER_WRITER = 150

# Each writer waits for the go file, then stores its traces (every third call an n=2 request: two traces
# in one transaction) and tries to create the one session every writer creates.
_WRITER = r"""
import json, sys, time
from pathlib import Path
from rllm.gateway.traces import SessionInfo, Trace, TraceStore

store_path, writer, count, go = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
store = TraceStore(store_path)
while not go.exists():
    time.sleep(0.002)
created = 0
try:
    store.create_session(SessionInfo(session_id="contended", metadata={"writer": writer}))
    created = 1
except KeyError:
    pass
i = 0
while i < count:
    n = 2 if i % 3 == 0 and i + 1 < count else 1
    store.add_many([
        Trace(trace_id=f"w{writer}-{i + k}", session_id=f"s{writer}-{(i + k) % 5}", request_id=f"r{writer}-{i}",
              choice_index=k, endpoint="completions", request={"prompt": "p"}, response_text=str(i + k),
              prompt_token_ids=[1, 2], completion_token_ids=[i + k], logprobs=[-0.5], latency_ms=1.0,
              upstream=f"writer-{writer}")
        for k in range(n)])
    i += n
store.close()
print(json.dumps({"created": created}))
"""


def test_several_writer_processes_store_every_trace_once(tmp_path: Path) -> None:
    db, go = tmp_path / "traces.db", tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(db), str(w), str(TRACES_PER_WRITER), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(WRITERS)
    ]
    try:
        time.sleep(1.0)  # let every writer open the store (and race on creating its schema) first
        go.touch()
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    assert sum(json.loads(out)["created"] for out, _ in outs) == 1  # one creator; the others got KeyError

    with TraceStore(db) as store:
        rows = store.query(TraceQuery(limit=10_000))
        ids = [t.trace_id for _, t in rows]
        expected = {f"w{w}-{i}" for w in range(WRITERS) for i in range(TRACES_PER_WRITER)}
        assert len(ids) == len(expected) and set(ids) == expected  # every trace, each once
        seqs = [seq for seq, _ in rows]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
        # Each writer's traces appear in the order it wrote them (its commits are ordered by seq).
        for w in range(WRITERS):
            mine = [int(t.trace_id.split("-")[1]) for _, t in rows if t.upstream == f"writer-{w}"]
            assert mine == list(range(TRACES_PER_WRITER))
        # The n=2 requests kept both choices together under one request id.
        by_request: dict[str, list[int]] = {}
        for _, t in rows:
            by_request.setdefault(t.request_id, []).append(t.choice_index)
        assert all(sorted(c) in ([0], [0, 1]) for c in by_request.values())
        assert any(c == [0, 1] for c in by_request.values())
        # Paging with after_seq (how a reader follows the store) sees each trace once, too.
        paged, after = [], 0
        while True:
            page = store.query(TraceQuery(after_seq=after, limit=97))
            if not page:
                break
            paged += [t.trace_id for _, t in page]
            after = page[-1][0]
        assert paged == ids
        info = store.session("contended")
        assert info is not None and info.metadata["writer"] in range(WRITERS)
