"""Where curation reads conversations from: an eval's results and trace store, or a training run.

- ``conversations_from_eval(results)``: the JSONL ``rllm eval --output`` writes (one row per item and
  sample: reward, is_correct, session_id) and ``<results>.traces.db`` beside it, where the gateway recorded
  every call of each sample's session (role sub-sessions ``{session}:{role}`` included).
- ``conversations_from_run(run)``: a run directory's episode journal (``journal.db``: every finished
  episode of every step) with its trace store (``traces.db``, for the tool calls of ``@rllm.rollout``
  flows' replies); or, for a run known only to the run store, the sample of episodes the store keeps.

Each returns the conversations and a note for the summary (where they came from, what is missing).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from pathlib import Path
from typing import Any

from rllm.eval.curate import Call, Conversation, CurationError, assemble
from rllm.eval.runner import load_results
from rllm.gateway.traces import TraceQuery, TraceStore
from rllm.store import EpisodeJournal, EpisodeQuery, NotFound, StoreReader, default_store_path
from rllm.types import Trace

logger = logging.getLogger(__name__)

_PAGE = 10_000
_STORE_PAGE = 1000  # the run store's largest page of episodes


def _traces_by_session(store: TraceStore) -> dict[str, list[Trace]]:
    """Every trace of ``store`` by session id, in call order."""
    by_session: dict[str, list[Trace]] = defaultdict(list)
    after = 0
    while True:
        page = store.query(TraceQuery(after_seq=after, limit=_PAGE))
        for _, trace in page:
            by_session[trace.session_id].append(trace)
        if len(page) < _PAGE:
            return by_session
        after = page[-1][0]


def _trace_call(trace: Trace) -> Call | None:
    """A chat call as recorded by the gateway; None for a text completion (no messages to imitate)."""
    messages = trace.request.get("messages")
    if not messages:
        return None
    reply = trace.response_message or {"role": "assistant", "content": trace.response_text}
    tokens = sum(trace.sampled_mask) if trace.trainable and trace.completion_token_ids else None
    return Call(list(messages), reply, tokens, trace.request.get("tools") or None)


def _by_episode(traces_by_session: dict[str, list[Trace]]) -> dict[str, dict[str, list[Trace]]]:
    """The traces of each possible episode session by role: a session's own calls are role ``default`` of
    that session, a ``{session}:{role}`` sub-session's are ``role`` of ``{session}``."""
    out: dict[str, dict[str, list[Trace]]] = defaultdict(dict)
    for sid, traces in traces_by_session.items():
        out[sid].setdefault("default", []).extend(traces)
        for i, char in enumerate(sid):
            if char == ":":
                out[sid[:i]].setdefault(sid[i + 1 :], []).extend(traces)
    return out


def conversations_from_eval(
    results: str | Path, *, tool_parser: str = "hermes"
) -> tuple[list[Conversation], str]:
    """The conversations of an eval's results file (the latest row of each item and sample)."""
    path = Path(results)
    if not path.is_file():
        raise CurationError(f"no results file {path}: pass the --output of an `rllm eval` run")
    db = path.with_suffix(".traces.db")
    if not db.is_file():
        raise CurationError(
            f"{path} has no trace store beside it ({db.name}): the conversations are recorded there by "
            "`rllm eval`; curate a results file in the directory its eval wrote it to"
        )
    latest: dict[tuple[str, int], dict[str, Any]] = {}
    for row in load_results(path):
        if "session_id" not in row or "task_id" not in row:
            raise CurationError(f"{path} is not an `rllm eval` results file (rows lack task_id/session_id)")
        latest[(row["task_id"], int(row["sample"]))] = row  # a re-run failed sample: the later row wins
    with TraceStore(db) as store:
        by_episode = _by_episode(_traces_by_session(store))
    convs: list[Conversation] = []
    for (task_id, sample), row in latest.items():
        failed = row.get("error") is not None
        for role, traces in by_episode.get(row["session_id"], {}).items():
            calls = [c for c in map(_trace_call, traces) if c is not None]
            for messages, tokens, tools in assemble(calls, tool_parser):
                convs.append(
                    Conversation(
                        messages=messages,
                        task_id=str(task_id),
                        reward=float(row.get("reward") or 0.0),
                        is_correct=row.get("is_correct"),
                        source=f"eval:{path.name}#{sample}",
                        role=role,
                        response_tokens=tokens,
                        tools=tools,
                        failed=failed,
                        order=len(convs),
                    )
                )
    note = f"source: {path} ({len(latest)} samples) with {db.name}"
    return convs, note


# ------------------------------------------------------------------------------------------ runs


class _RunTraces:
    """A run's trace store (``traces.db``), read one session at a time as steps name their trace: the
    replies' tool calls and the tools offered, which a journaled step does not keep."""

    def __init__(self, run_dir: Path | None) -> None:
        db = None if run_dir is None else run_dir / "traces.db"
        self.store = TraceStore(db) if db is not None and db.is_file() else None
        self.sessions: dict[str, dict[str, Trace]] = {}

    def get(self, info: dict[str, Any]) -> Trace | None:
        trace_id, session_id = info.get("trace_id"), info.get("session_id")
        if self.store is None or not trace_id or not session_id:
            return None
        if session_id not in self.sessions:
            self.sessions[session_id] = {t.trace_id: t for t in self.store.list(session_id)}
        return self.sessions[session_id].get(trace_id)

    def close(self) -> None:
        if self.store is not None:
            self.store.close()


def _step_call(step: dict[str, Any], traces: _RunTraces, tokens_known: bool) -> Call | None:
    """A journaled step (``Step.model_dump``) or a stored one (the run store's detail) as a call."""
    messages = step.get("messages") or []
    if not messages or any(m.get("raw_prompt") for m in messages):
        return None  # a call made with token ids only: no chat messages to imitate
    trace = traces.get(step.get("info") or {})
    text = step["response_text"] if "response_text" in step else step.get("response", "")
    reply = trace.response_message if trace is not None and trace.response_message else None
    mask = step.get("response_mask")
    tokens = sum(mask) if tokens_known and mask is not None else None
    tools = trace.request.get("tools") if trace is not None else None
    return Call(list(messages), reply or {"role": "assistant", "content": text}, tokens, tools or None)


def _episode_conversations(
    episode: dict[str, Any],
    step: int,
    run_name: str,
    traces: _RunTraces,
    tool_parser: str,
    start: int,
) -> list[Conversation]:
    """The conversations of one episode (a dict: ``Episode.model_dump`` or the store's detail)."""
    failed = bool(episode.get("error")) or episode.get("termination_reason") in ("error", "timeout")
    convs = []
    by_role: dict[str, list[Call]] = defaultdict(list)
    rewards: dict[str, float | None] = {}
    for traj in episode["trajectories"]:
        for s in traj["steps"]:
            # Merged multi-call steps in the store lack the mask: their n_response_tokens count tool results too.
            known = "response_mask" in s or (s.get("info") or {}).get("calls", 1) == 1
            if "response_mask" not in s and known:
                s = {**s, "response_mask": [1] * int(s.get("n_response_tokens") or 0)}
            call = _step_call(s, traces, known)
            if call is not None:
                by_role[traj["name"]].append(call)
        rewards.setdefault(traj["name"], traj.get("reward"))
    for role, calls in by_role.items():
        role_reward = rewards.get(role)
        for messages, tokens, tools in assemble(calls, tool_parser):
            convs.append(
                Conversation(
                    messages=messages,
                    task_id=str(episode["task_id"]),
                    reward=float(role_reward if role_reward is not None else episode.get("reward") or 0.0),
                    is_correct=episode.get("is_correct"),
                    source=f"run:{run_name}@{step}",
                    role=role,
                    response_tokens=tokens,
                    tools=tools,
                    step=step,
                    failed=failed,
                    order=start + len(convs),
                )
            )
    return convs


def conversations_from_run(
    run: str | Path, *, store: str | Path | None = None, tool_parser: str = "hermes"
) -> tuple[list[Conversation], str]:
    """The conversations of a training run: a run directory, or a run's name or id in the run store
    (``store``; default ``$RLLM_STORE``, else ``runs/rllm.db``). Steps are numbered as logged (1-based)."""
    path = Path(run)
    if path.is_dir():
        if not (path / "journal.db").is_file():
            raise CurationError(
                f"{path} has no journal.db: not the directory of a training run that journals its episodes"
            )
        return _from_journal(path, tool_parser)
    store_path = Path(store) if store is not None else default_store_path()
    reader = StoreReader(store_path)
    try:
        location = reader.location(str(run))
    except NotFound:
        raise CurationError(
            f"no run directory {run} and no training run named {run!r} in the run store {store_path} "
            "(pass a run directory, or --store)"
        ) from None
    if (location / "journal.db").is_file():
        return _from_journal(location, tool_parser)
    return _from_store(reader, str(run), location, tool_parser)


def _from_journal(run_dir: Path, tool_parser: str) -> tuple[list[Conversation], str]:
    traces = _RunTraces(run_dir)
    convs: list[Conversation] = []
    episodes = 0
    try:
        with EpisodeJournal(run_dir / "journal.db") as journal:
            for step in journal.steps():
                for episode in journal.episodes(step).values():
                    episodes += 1
                    convs += _episode_conversations(
                        episode.model_dump(mode="json"),
                        step + 1,
                        run_dir.name,
                        traces,
                        tool_parser,
                        len(convs),
                    )
    finally:
        traces.close()
    if not episodes:
        raise CurationError(f"{run_dir} has no finished episodes in its journal yet: nothing to curate")
    return convs, f"source: {run_dir}/journal.db ({episodes} episodes, every one the run finished)"


def _from_store(
    reader: StoreReader, ref: str, location: Path, tool_parser: str
) -> tuple[list[Conversation], str]:
    run_id = next(r["id"] for r in reader.runs() if r["kind"] == "train" and ref in (r["id"], r["name"]))
    convs: list[Conversation] = []
    episodes = 0
    traces = _RunTraces(location if location.is_dir() else None)
    try:
        for step in reader.steps(run_id):
            offset = 0
            while True:
                query = EpisodeQuery(step=step, limit=_STORE_PAGE, offset=offset)
                page = reader.episodes(run_id, query)["episodes"]
                for summary in page:
                    detail = reader.episode(summary["id"])
                    episodes += 1
                    convs += _episode_conversations(detail, step, ref, traces, tool_parser, len(convs))
                if len(page) < _STORE_PAGE:
                    break
                offset += _STORE_PAGE
    finally:
        traces.close()
    if not episodes:
        raise CurationError(f"run {ref!r} has no stored episodes in {reader.path}: nothing to curate")
    note = (
        f"source: the run store {reader.path} ({episodes} episodes): only the sample of each step's episodes "
        f"the store keeps (trainer.store_episodes_per_step), since {location} has no journal.db"
    )
    return convs, note
