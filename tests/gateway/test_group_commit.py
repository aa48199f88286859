"""Group commit of the fsync-ed trace store (rllm.gateway.group_commit, TraceStore.add_groups): concurrent
calls share transactions, every one of them lands, each reply comes only after its own trace is committed
(seen from a second SQLite connection the moment the reply arrives), and a failure fails only the calls
it concerns. Real SQLite with synchronous=FULL, the real gateway over HTTP on loopback, the tiny model
behind it; the failures are real SQLite errors, raised by triggers another connection installs.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from gateway_support import MODEL

from rllm.gateway.app import create_app
from rllm.gateway.group_commit import GroupCommit
from rllm.gateway.server import GatewayServer
from rllm.gateway.traces import TraceStore
from rllm.inference.local import LocalEngine
from rllm.types import Trace


def _trace(session: str, request: str, trace_id: str | None = None) -> Trace:
    extra = {"trace_id": trace_id} if trace_id else {}
    return Trace(
        session_id=session,
        request_id=request,
        endpoint="completions",
        request={"prompt": "x"},
        response_text="ab",
        prompt_token_ids=[1],
        completion_token_ids=[5, 6],
        logprobs=[-0.5, -1.0],
        finish_reason="stop",
        latency_ms=1.0,
        **extra,
    )


def _refuse(db: Path, name: str, session: str, how: str) -> None:
    """From another connection: make SQLite refuse every trace of ``session`` (``ABORT``: that statement
    only; ``ROLLBACK``: the whole transaction it is in)."""
    with sqlite3.connect(db) as conn:
        conn.execute(
            f"CREATE TRIGGER {name} BEFORE INSERT ON traces WHEN NEW.session_id = '{session}' "
            f"BEGIN SELECT RAISE({how}, 'refused by test trigger {name}'); END"
        )
    conn.close()


def _allow(db: Path, name: str) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute(f"DROP TRIGGER {name}")
    conn.close()


def test_add_groups_leaves_out_only_the_group_sqlite_refuses(tmp_path: Path) -> None:
    with TraceStore(tmp_path / "t.db", fsync=True) as store:
        store.add(_trace("s", "r0", trace_id="taken"))
        errors = store.add_groups(
            [
                [_trace("s", "r1"), _trace("s", "r1")],
                [_trace("s", "r2"), _trace("s", "r2", trace_id="taken")],  # its 2nd row breaks UNIQUE
                [_trace("s", "r3")],
            ]
        )
        assert errors[0] is None and errors[2] is None
        assert isinstance(errors[1], sqlite3.IntegrityError)
        # r2's first row went back with its savepoint; the others kept the order of the groups.
        assert [t.request_id for t in store.list("s")] == ["r0", "r1", "r1", "r3"]


def test_a_transaction_that_fails_as_a_whole_stores_none_of_its_groups(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    with TraceStore(db, fsync=True) as store:
        assert store.add_groups([[_trace("a", "r0")]]) == [None]
        _refuse(db, "doom", "b", "ROLLBACK")
        with pytest.raises(sqlite3.IntegrityError, match="refused by test trigger doom"):
            store.add_groups([[_trace("a", "r1")], [_trace("b", "r2")], [_trace("a", "r3")]])
        assert [t.request_id for t in store.list("a")] == ["r0"] and store.list("b") == []
        _allow(db, "doom")
        # The connection is out of the failed transaction: the next one commits.
        assert store.add_groups([[_trace("b", "r4")]]) == [None]
        assert [t.request_id for t in store.list("b")] == ["r4"]


@pytest.fixture(scope="module")
def fsync_gateway(
    tiny_engine: LocalEngine, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path, GroupCommit]]:
    db = tmp_path_factory.mktemp("fsync-gateway") / "traces.db"
    store = TraceStore(db, fsync=True)
    app = create_app(tiny_engine, store, model_name=MODEL)
    assert app.state.gateway.group_commit is not None
    with GatewayServer(app) as srv:
        yield srv.url, db, app.state.gateway.group_commit
    store.close()


async def _calls(url: str, sessions: list[str], per_session: int, on_reply: Any = None) -> dict[str, list]:
    """``per_session`` calls one after another in each session, the sessions at the same time; per session
    the replies (status, body) in call order. ``on_reply(session, response)`` runs as each arrives."""

    async def session_calls(client: httpx.AsyncClient, session: str) -> list[tuple[int, dict]]:
        out = []
        for _ in range(per_session):
            r = await client.post(
                f"{url}/sessions/{session}/v1/completions",
                json={"model": MODEL, "prompt": "The", "max_tokens": 2},
            )
            if on_reply is not None:
                on_reply(session, r)
            out.append((r.status_code, r.json()))
        return out

    async with httpx.AsyncClient(timeout=60) as client:
        replies = await asyncio.gather(*(session_calls(client, s) for s in sessions))
    return dict(zip(sessions, replies))


def test_concurrent_calls_share_commits_and_each_reply_follows_its_commit(
    fsync_gateway: tuple[str, Path, GroupCommit],
) -> None:
    url, db, group = fsync_gateway
    reader = sqlite3.connect(db)  # a second connection, as the trainer or another process reads
    not_yet_committed: list[str] = []

    def check_committed(session: str, r: httpx.Response) -> None:
        row = reader.execute(
            "SELECT session_id FROM traces WHERE request_id = ?", (r.json()["id"],)
        ).fetchone()
        if row != (session,):
            not_yet_committed.append(r.json()["id"])

    calls0, transactions0 = group.calls, group.transactions
    sessions = [f"group-{i}" for i in range(8)]
    replies = asyncio.run(_calls(url, sessions, 4, check_committed))
    reader.close()
    assert not_yet_committed == []
    assert all(status == 200 for rs in replies.values() for status, _ in rs)
    assert group.calls - calls0 == 32
    assert group.transactions - transactions0 < 32  # calls waiting together shared a commit
    with TraceStore(db) as store:
        for s in sessions:  # every call landed once, in the order the session made them
            assert [t.request_id for t in store.list(s)] == [body["id"] for _, body in replies[s]]


def test_a_call_whose_trace_sqlite_refuses_fails_alone(fsync_gateway: tuple[str, Path, GroupCommit]) -> None:
    url, db, _ = fsync_gateway
    _refuse(db, "poison", "poisoned", "ABORT")
    try:
        replies = asyncio.run(_calls(url, ["poisoned", *(f"beside-{i}" for i in range(6))], 2))
    finally:
        _allow(db, "poison")
    for status, body in replies.pop("poisoned"):
        assert status == 503 and body["error"]["code"] == "trace_store_unavailable"
        assert "refused by test trigger poison" in body["error"]["message"]
    with TraceStore(db) as store:
        assert store.list("poisoned") == []
        for s, rs in replies.items():
            assert [status for status, _ in rs] == [200, 200]
            assert [t.request_id for t in store.list(s)] == [body["id"] for _, body in rs]


def test_a_failed_transaction_fails_exactly_its_calls_and_keeps_earlier_ones(
    fsync_gateway: tuple[str, Path, GroupCommit],
) -> None:
    url, db, _ = fsync_gateway
    before = asyncio.run(_calls(url, ["earlier"], 2))["earlier"]
    _refuse(db, "doom", "doomed", "ROLLBACK")
    try:
        replies = asyncio.run(_calls(url, ["doomed", *(f"near-{i}" for i in range(6))], 2))
    finally:
        _allow(db, "doom")
    assert all(status == 503 for status, _ in replies["doomed"])
    with TraceStore(db) as store:
        assert [t.request_id for t in store.list("earlier")] == [body["id"] for _, body in before]
        assert store.list("doomed") == []
        stored = {t.request_id for s in replies for t in store.list(s)}
    # Acknowledged <=> stored: a call that shared the failed transaction failed too, no other did.
    acknowledged = {body["id"] for rs in replies.values() for status, body in rs if status == 200}
    assert acknowledged == stored
    for rs in replies.values():
        for status, body in rs:
            assert status == 200 or body["error"]["code"] == "trace_store_unavailable"
    after = asyncio.run(_calls(url, ["doomed"], 1))["doomed"]
    assert [status for status, _ in after] == [200]
