"""``RunWriter``: one run's writes to the run store, from the process that runs it.

    run = RunWriter.start(path, kind="train", name="gsm8k-lora", config=cfg.model_dump(), ...)
    run.stage_episodes(step, episodes, tokenizer)          # sampled now, written with the step's metrics
    run.log(step, metrics)                                 # one committed transaction per step
    run.finish(summary)                                    # or run.fail(exc)

Every call that writes returns after its transaction is committed, so a crash loses nothing already
logged. While the run is open a daemon thread also refreshes ``heartbeat_at`` every ``heartbeat_s``
seconds; a reader sees a run whose heartbeat stopped (the process died without ``finish``/``fail``) as
"crashed". The writer is a :class:`~rllm.utils.metrics.MetricsSink`: the trainer hands it to its
``MetricsLogger`` beside the console and JSONL sinks.

Blocking (sqlite3): call it from the training loop's thread, never from inside an event loop.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import sqlite3
import subprocess
import threading
import time
import traceback
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from rllm._version import __version__
from rllm.store.records import (
    EpisodeRecord,
    Tokenizer,
    clean,
    dumps,
    episode_record,
    sample_episodes,
    token_texts,
)
from rllm.store.schema import connect_writer
from rllm.types import Episode

logger = logging.getLogger(__name__)

RunKind = Literal["train", "eval", "gateway", "sft"]

# The metrics whose latest value the runs page shows (each run keeps those it logs).
HEADLINE_METRICS = (
    "reward/mean",
    "accuracy",
    "eval/accuracy",
    "eval/reward",
    "train/loss",
    "response_len/mean",
    "eval/mean_reward",
    "eval/loss",
)


def default_store_path(run_dir: str | Path = "runs") -> Path:
    """Where runs are recorded when no path is given: ``$RLLM_STORE`` if set, else ``run_dir/rllm.db``."""
    env = os.environ.get("RLLM_STORE")
    return Path(env) if env else Path(run_dir) / "rllm.db"


def code_version() -> str:
    """``git describe`` of the checkout rllm runs from, if it is one; else the installed package version."""
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--tags"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        )
        return out.stdout.strip() or __version__
    except (OSError, subprocess.SubprocessError):
        return __version__


def new_run_id(name: str) -> str:
    """``<name>-<yyyymmdd-hhmmss>-<4 hex>``, with anything but letters, digits, ``.``, ``_``, ``-`` in the
    name replaced by ``_`` (run ids appear in URLs)."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "run"
    return f"{slug}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


class RunWriter:
    """Writes one run (its row, metrics, sampled episodes, eval results) into the store. See the module
    docstring for the life cycle. Use :meth:`start`, not the constructor."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        run_seq: int,
        run_id: str,
        *,
        episodes_per_step: int,
        heartbeat_s: float,
        latest: dict[str, float],
        last_step: int | None,
    ) -> None:
        self._conn = conn
        self._seq = run_seq
        self.id = run_id
        self.episodes_per_step = episodes_per_step
        self._lock = threading.Lock()
        self._key_ids: dict[str, int] = {}
        self._known_tokens: set[int] = set()
        self._token_texts: dict[int, str] = {}
        self._pending: list[EpisodeRecord] = []
        self._latest = latest
        self._last_step = last_step
        self._closed = False
        self.write_s = 0.0  # time spent in committed writes (the cost the run pays for the store)
        self.writes = 0
        self._stop = threading.Event()
        self._heartbeat_s = heartbeat_s
        self._beater = threading.Thread(
            target=self._beat_forever, name=f"rllm-store-heartbeat-{run_id}", daemon=True
        )
        self._beater.start()

    # ------------------------------------------------------------------ opening
    @classmethod
    def start(
        cls,
        path: str | Path,
        *,
        kind: RunKind,
        name: str,
        config: Mapping[str, Any],
        model: str | None = None,
        task: str | None = None,
        location: str | Path | None = None,
        resume_from_step: int | None = None,
        episodes_per_step: int = 16,
        heartbeat_s: float = 10.0,
        fsync: bool = False,
    ) -> RunWriter:
        """Open the store at ``path`` (created if missing) and start a run of ``kind``.

        ``location`` is where the run's own files live (a training run's directory, an eval's results
        file). With ``resume_from_step`` set, the newest run of this kind at that location continues
        (status back to running, anything it logged after that step dropped, as the resumed run redoes
        it); when there is none, a new run starts.
        """
        if episodes_per_step < 0:
            raise ValueError(f"episodes_per_step must be >= 0, got {episodes_per_step}")
        conn = connect_writer(Path(path), fsync=fsync)
        loc = str(Path(location).resolve()) if location is not None else None
        now = time.time()
        try:
            with _transaction(conn):
                row = None
                if resume_from_step is not None and loc is not None:
                    row = conn.execute(
                        "SELECT seq, id, latest FROM runs WHERE location = ? AND kind = ? ORDER BY seq DESC LIMIT 1",
                        (loc, kind),
                    ).fetchone()
                if row is not None:
                    seq, run_id = row[0], row[1]
                    _drop_after(conn, seq, resume_from_step)  # type: ignore[arg-type]
                    last = conn.execute(
                        "SELECT MAX(m.step) FROM metrics m JOIN metric_keys k USING (key_id) WHERE k.run = ?",
                        (seq,),
                    ).fetchone()[0]
                    latest = _latest_values(conn, seq)
                    conn.execute(
                        "UPDATE runs SET status = 'running', ended_at = NULL, error = NULL, heartbeat_at = ?, "
                        "config = ?, code_version = ?, last_step = ?, latest = ? WHERE seq = ?",
                        (now, dumps(config), code_version(), last, dumps(latest), seq),
                    )
                else:
                    run_id, last, latest = new_run_id(name), None, {}
                    seq = conn.execute(
                        "INSERT INTO runs (id, name, kind, status, started_at, heartbeat_at, model, task, location, "
                        "config, code_version) VALUES (?, ?, ?, 'running', ?, ?, ?, ?, ?, ?, ?)",
                        (run_id, name, kind, now, now, model, task, loc, dumps(config), code_version()),
                    ).lastrowid
        except BaseException:
            conn.close()
            raise
        logger.info(
            "recording run %s in the run store %s (browse it with `rllm ui --store %s`)", run_id, path, path
        )
        return cls(
            conn,
            seq,
            run_id,
            episodes_per_step=episodes_per_step,
            heartbeat_s=heartbeat_s,
            latest=latest,
            last_step=last,
        )

    # ------------------------------------------------------------------ writing
    def stage_episodes(
        self, step: int, episodes: Sequence[Episode], tokenizer: Tokenizer | None = None
    ) -> None:
        """Keep a sample of ``episodes`` (see :func:`~rllm.store.records.sample_episodes`) as records of
        training step ``step``; they are written with the next :meth:`log`, in the same transaction.
        ``tokenizer`` gives the token texts (each id is decoded once per run); without it tokens show as
        ids only."""
        for episode in sample_episodes(episodes, self.episodes_per_step):
            record = episode_record(episode, step, tokenizer)
            if tokenizer is not None:
                new = sorted(record.token_ids - self._known_tokens)
                self._token_texts.update(zip(new, token_texts(tokenizer, new)))
                self._known_tokens.update(new)
            self._pending.append(record)

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        """Commit ``metrics`` as the values at ``step``, with the episodes staged since the last call."""
        values = {k: clean(float(v)) for k, v in metrics.items()}
        with self._write() as conn:
            rows = [(self._key_id(conn, k), int(step), v) for k, v in values.items()]
            conn.executemany("INSERT OR REPLACE INTO metrics (key_id, step, value) VALUES (?, ?, ?)", rows)
            self._insert_episodes(conn)
            self._last_step = step if self._last_step is None else max(self._last_step, step)
            self._latest.update({k: v for k, v in values.items() if k in HEADLINE_METRICS and v is not None})
            conn.execute(
                "UPDATE runs SET last_step = ?, latest = ?, heartbeat_at = ? WHERE seq = ?",
                (self._last_step, dumps(self._latest), time.time(), self._seq),
            )

    def add_eval_results(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Commit ``rllm eval`` result rows (one per item and sample; a row for the same item and sample
        replaces the earlier one, as a re-run failed sample does in the results file)."""
        values = [
            (
                self._seq,
                str(r["task_id"]),
                int(r["sample"]),
                clean(r.get("reward")),
                None if r.get("is_correct") is None else int(bool(r["is_correct"])),
                r.get("output"),
                dumps(r.get("info") or {}),
                r.get("error"),
                r.get("termination_reason"),
            )
            for r in rows
        ]
        with self._write() as conn:
            conn.executemany(
                "INSERT OR REPLACE INTO eval_results (run, task_id, sample, reward, is_correct, output, info, error, "
                "termination_reason) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                values,
            )
            conn.execute("UPDATE runs SET heartbeat_at = ? WHERE seq = ?", (time.time(), self._seq))

    def finish(self, summary: Mapping[str, Any] | None = None) -> None:
        """The run ended normally: status "finished", with its ``summary`` (headline numbers, paths)."""
        self._end("finished", summary=summary)

    def fail(self, error: BaseException | str) -> None:
        """The run stopped on ``error``: status "failed", with the exception's text and traceback."""
        if isinstance(error, BaseException):
            head = "".join(traceback.format_exception_only(type(error), error)).strip()
            tb = "".join(traceback.format_exception(type(error), error, error.__traceback__))
            text = f"{head}\n\n{tb}" if error.__traceback__ is not None else head
        else:
            text = str(error)
        self._end("failed", error=text)

    def close(self) -> None:
        """As a metrics sink: nothing to flush (every :meth:`log` is committed). The run ends, and the
        store is released, with :meth:`finish` or :meth:`fail`."""

    # ------------------------------------------------------------------ internals
    def _end(
        self, status: str, *, summary: Mapping[str, Any] | None = None, error: str | None = None
    ) -> None:
        if self._closed:
            return
        self._stop.set()
        self._beater.join(timeout=5)
        try:
            with self._write() as conn:
                self._insert_episodes(conn)  # staged but never logged: keep them
                conn.execute(
                    "UPDATE runs SET status = ?, ended_at = ?, heartbeat_at = ?, summary = ?, error = ? WHERE seq = ?",
                    (
                        status,
                        time.time(),
                        time.time(),
                        None if summary is None else dumps(summary),
                        error,
                        self._seq,
                    ),
                )
        finally:
            with self._lock:
                self._closed = True
                self._conn.close()
        if self.writes:
            logger.info(
                "run store: %d writes, %.1f ms each on average",
                self.writes,
                1000 * self.write_s / self.writes,
            )

    @contextmanager
    def _write(self, *, timed: bool = True) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self._closed:
                raise RuntimeError(
                    f"run {self.id} has ended (finish/fail was called): nothing more can be written"
                )
            t0 = time.perf_counter()
            with _transaction(self._conn):
                yield self._conn
            if timed:
                self.write_s += time.perf_counter() - t0
                self.writes += 1

    def _key_id(self, conn: sqlite3.Connection, name: str) -> int:
        if name not in self._key_ids:
            conn.execute("INSERT OR IGNORE INTO metric_keys (run, name) VALUES (?, ?)", (self._seq, name))
            self._key_ids[name] = conn.execute(
                "SELECT key_id FROM metric_keys WHERE run = ? AND name = ?", (self._seq, name)
            ).fetchone()[0]
        return self._key_ids[name]

    def _insert_episodes(self, conn: sqlite3.Connection) -> None:
        for r in self._pending:
            cur = conn.execute(
                "INSERT OR IGNORE INTO episodes (id, run, step, task_id, reward, is_correct, termination_reason, "
                "error, roles, n_steps, preview) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    r.id,
                    self._seq,
                    r.step,
                    r.task_id,
                    r.reward,
                    r.is_correct,
                    r.termination_reason,
                    r.error,
                    dumps(r.roles),
                    r.n_steps,
                    r.preview,
                ),
            )
            if not cur.rowcount:  # this episode is already stored
                continue
            seq = cur.lastrowid
            conn.execute(
                "INSERT INTO episode_details (episode, detail) VALUES (?, ?)", (seq, dumps(r.detail))
            )
            conn.execute("INSERT INTO episodes_text (rowid, text) VALUES (?, ?)", (seq, r.search_text))
            conn.executemany(
                "INSERT INTO episode_steps (episode, trajectory, step, prompt_ids, response_ids, logprobs, "
                "trainer_logprobs, mask, advantage, drift_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        seq,
                        t.trajectory,
                        t.step,
                        t.prompt_ids,
                        t.response_ids,
                        t.logprobs,
                        t.trainer_logprobs,
                        t.mask,
                        t.advantage,
                        t.drift_at,
                    )
                    for t in r.tokens
                ],
            )
        if self._token_texts:
            conn.executemany(
                "INSERT OR IGNORE INTO token_texts (run, token_id, text) VALUES (?, ?, ?)",
                [(self._seq, tid, text) for tid, text in self._token_texts.items()],
            )
        self._pending.clear()
        self._token_texts.clear()

    def _beat_forever(self) -> None:
        while not self._stop.wait(self._heartbeat_s):
            try:
                with self._write(timed=False) as conn:
                    conn.execute("UPDATE runs SET heartbeat_at = ? WHERE seq = ?", (time.time(), self._seq))
            except (sqlite3.Error, RuntimeError) as exc:  # the run ended meanwhile, or the disk is full
                logger.warning("run store heartbeat of %s failed: %s", self.id, exc)


@contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _drop_after(conn: sqlite3.Connection, run_seq: int, step: int) -> None:
    """Forget what a run logged after ``step`` (a resumed run redoes those steps)."""
    conn.execute(
        "DELETE FROM metrics WHERE step > ? AND key_id IN (SELECT key_id FROM metric_keys WHERE run = ?)",
        (step, run_seq),
    )
    doomed = "SELECT seq FROM episodes WHERE run = ? AND step > ?"
    conn.execute(f"DELETE FROM episode_steps WHERE episode IN ({doomed})", (run_seq, step))
    conn.execute(f"DELETE FROM episode_details WHERE episode IN ({doomed})", (run_seq, step))
    conn.execute(f"DELETE FROM episodes_text WHERE rowid IN ({doomed})", (run_seq, step))
    conn.execute("DELETE FROM episodes WHERE run = ? AND step > ?", (run_seq, step))


def _latest_values(conn: sqlite3.Connection, run_seq: int) -> dict[str, float]:
    marks = ", ".join("?" * len(HEADLINE_METRICS))
    rows = conn.execute(
        f"SELECT k.name, (SELECT value FROM metrics m WHERE m.key_id = k.key_id AND value IS NOT NULL "
        f"ORDER BY step DESC LIMIT 1) FROM metric_keys k WHERE k.run = ? AND k.name IN ({marks})",
        (run_seq, *HEADLINE_METRICS),
    ).fetchall()
    return {name: value for name, value in rows if value is not None}
