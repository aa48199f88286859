"""The store under the failures that matter: a writer killed mid-run, and readers busy while it writes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from rllm.store import RunWriter, StoreReader
from rllm.store.schema import connect_reader
from rllm.types import Episode, Step, Trajectory

WRITER = textwrap.dedent("""
    import sys
    from rllm.store import RunWriter
    from rllm.types import Episode, Step, Trajectory

    run = RunWriter.start(sys.argv[1], kind="train", name="doomed", config={}, heartbeat_s=0.05)
    step = 0
    while True:  # until killed
        step += 1
        episode = Episode(task_id=f"t{step}", trajectories=[Trajectory(steps=[
            Step(prompt_ids=[1, 2], response_ids=[3] * 50, logprobs=[-1.0] * 50)])])
        run.stage_episodes(step, [episode])
        run.log(step, {"reward/mean": float(step)})
        print(step, flush=True)  # acknowledged: committed
""")


def test_a_killed_writer_loses_nothing_committed_and_reads_as_crashed(tmp_path: Path) -> None:
    store = tmp_path / "rllm.db"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(store)], stdout=subprocess.PIPE, text=True, env=env
    )
    acked = 0
    try:
        assert proc.stdout is not None
        while acked < 30:
            line = proc.stdout.readline()
            assert line, f"the writer exited early with code {proc.wait()}"
            acked = int(line)
    finally:
        proc.send_signal(signal.SIGKILL)  # the process this test started, and only it
        proc.wait()
    assert proc.returncode == -signal.SIGKILL

    reader = StoreReader(store, stale_after_s=0.5)
    [run] = reader.runs()
    series = reader.metrics(run["id"], ["reward/mean"])["series"]["reward/mean"]
    assert len(series) >= acked and [s for s, _ in series] == list(range(1, len(series) + 1))
    assert reader.steps(run["id"])[:acked] == list(range(1, acked + 1))
    beat = run["heartbeat_at"]
    time.sleep(0.6)
    [run] = reader.runs()
    assert run["heartbeat_at"] == beat  # nobody beats any more ...
    assert run["status"] == "crashed"  # ... so the run that never finished reads as crashed
    assert (
        StoreReader(store).runs()[0]["status"] == "running"
    )  # (within the default 60 s it still looks alive)


def test_an_open_read_transaction_does_not_block_the_writer(tmp_path: Path) -> None:
    store = tmp_path / "rllm.db"
    run = RunWriter.start(store, kind="train", name="r", config={})
    run.log(1, {"x": 1.0})
    reader = connect_reader(store)
    reader.execute("BEGIN")
    assert reader.execute("SELECT COUNT(*) FROM metrics").fetchone() == (1,)  # the snapshot is taken

    t0 = time.perf_counter()
    for step in range(2, 22):
        episode = Episode(
            task_id="t",
            trajectories=[Trajectory(steps=[Step(prompt_ids=[1], response_ids=[2], logprobs=[-0.1])])],
        )
        run.stage_episodes(step, [episode])
        run.log(step, {"x": float(step)})
    assert time.perf_counter() - t0 < 5.0  # would be the 30 s lock timeout if the reader blocked it
    assert reader.execute("SELECT COUNT(*) FROM metrics").fetchone() == (1,)  # a consistent snapshot
    reader.execute("COMMIT")
    assert reader.execute("SELECT COUNT(*) FROM metrics").fetchone() == (21,)
    reader.close()
    run.finish()


def test_readers_in_threads_while_the_writer_commits(tmp_path: Path) -> None:
    store = tmp_path / "rllm.db"
    run = RunWriter.start(store, kind="train", name="r", config={})
    run.log(0, {"x": 0.0})
    errors: list[BaseException] = []
    seen: list[int] = []
    done = threading.Event()

    def read() -> None:
        reader = StoreReader(store)
        while not done.is_set():
            try:
                series = reader.metrics(run.id, ["x"])["series"]["x"]
                assert [s for s, _ in series] == list(range(len(series)))  # never a torn step
                seen.append(len(series))
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
                return

    threads = [threading.Thread(target=read) for _ in range(2)]
    for t in threads:
        t.start()
    for step in range(1, 200):
        run.log(step, {"x": float(step)})
    done.set()
    for t in threads:
        t.join()
    run.finish()
    assert not errors, errors[0]
    assert seen and max(seen) <= 200
