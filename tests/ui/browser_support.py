"""What the browser tests run against: the real ``rllm ui`` app on a free port, a run store filled by
real tiny-model training runs, a run whose metrics a thread keeps appending, and headless Chromium.

Chromium comes from the system (Debian's ``chromium`` package, or ``$RLLM_CHROMIUM``), not from
Playwright's own download; ``scripts/setup_ui_tests.sh`` installs it and the ``playwright`` package.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
SETUP_HINT = "run `bash scripts/setup_ui_tests.sh .venv` (Debian chromium + the playwright package)"


def find_chromium() -> str | None:
    """The Chromium executable to drive: ``$RLLM_CHROMIUM`` if set, else the first one on PATH."""
    explicit = os.environ.get("RLLM_CHROMIUM")
    if explicit:
        return explicit if Path(explicit).is_file() else None
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


@contextmanager
def serve_ui(store_path: Path) -> Iterator[str]:
    """The real ``rllm ui`` app over ``store_path``, served by uvicorn in a thread; yields its base URL."""
    import uvicorn

    from rllm.ui.app import create_app

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        create_app(store_path, poll_s=0.2), log_level="warning", lifespan="off", timeout_graceful_shutdown=1
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="rllm-ui-test", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the rllm ui test server did not start on port {port}")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def train_tiny_runs(workdir: Path, names: tuple[str, ...]) -> Path:
    """Train the tiny random Llama once per name (a few steps each, on the CPU) into one run store.

    The runs recompute trainer logprobs (``backend.old_logprobs=recompute``) so the token view has both
    logprobs to compare. They run in a worker thread: the trainer calls ``asyncio.run``, which cannot run
    in a thread where Playwright's sync API already has an event loop. Returns the store's path.
    """
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(_train_tiny_runs, workdir, names).result()


def _train_tiny_runs(workdir: Path, names: tuple[str, ...]) -> Path:
    store = workdir / "rllm.db"
    for i, name in enumerate(names):
        tiny_training(workdir, store, name, seed=i, steps=2)
    return store


def tiny_training(workdir: Path, store: Path, name: str, *, seed: int = 0, steps: int = 2) -> None:
    """One real ``rllm train`` of the tiny random Llama (made once in ``workdir``), recorded in ``store``."""
    from rllm.cli.main import main
    from rllm.models import make_tiny_llama

    model = workdir / "tiny_model"
    if not (model / "config.json").exists():
        make_tiny_llama(model, seed=0)
    code = main(
        [
            "train",
            f"model.path={model}",
            f"trainer.run_dir={workdir / 'runs'}",
            f"trainer.name={name}",
            f"trainer.store={store}",
            f"trainer.seed={seed}",
            f"trainer.steps={steps}",
            "rollout.batch_size=2",
            "rollout.group_size=2",
            "rollout.max_tokens=8",
            "eval.max_tokens=4",
            "data.train_size=8",
            "data.test_size=4",
            "trainer.plot=false",
            "algorithm.filters.drop_zero_variance=false",
            "backend.device=cpu",
            "backend.old_logprobs=recompute",
            "trainer.loggers=[jsonl]",
        ]
    )
    if code != 0:
        raise RuntimeError(f"tiny training run {name!r} exited with {code}")


class MetricWriter(threading.Thread):
    """A training run as the store sees it: a ``RunWriter`` that logs one step of metrics every
    ``interval_s`` seconds (``steps`` in all, the first ``initial`` at once), then finishes."""

    def __init__(self, store: Path, name: str, *, steps: int, initial: int, interval_s: float) -> None:
        super().__init__(name=f"metric-writer-{name}", daemon=True)
        from rllm.store import RunWriter

        self.writer = RunWriter.start(
            store, kind="train", name=name, config={"trainer": {"name": name}}, model="tiny", task="larger"
        )
        self.steps, self.initial, self.interval_s = steps, initial, interval_s
        for step in range(1, initial + 1):
            self.writer.log(step, self.metrics(step))
        self.stop = threading.Event()

    @staticmethod
    def metrics(step: int) -> dict[str, float]:
        return {"reward/mean": 1 - 0.9**step, "train/loss": 0.5 / step}

    def run(self) -> None:
        try:
            for step in range(self.initial + 1, self.steps + 1):
                if self.stop.wait(self.interval_s):
                    break
                self.writer.log(step, self.metrics(step))
        finally:
            self.writer.finish({"steps": self.steps})


def write_agent_run(store: Path) -> str:
    """A finished run written through the real ``RunWriter``: one two-call episode whose first call made a
    tool call and whose second call has trainer logprobs and a drift point, plus graded eval items.
    Returns the run id."""
    from rllm.store import RunWriter
    from rllm.types import Episode, Step, Trajectory

    question = "What is 17 * 23? Use the calculator."
    first = [{"role": "system", "content": "You can call tools."}, {"role": "user", "content": question}]
    tool_call = {
        "id": "call_7",
        "type": "function",
        "function": {"name": "calculator", "arguments": '{"expression": "17 * 23"}'},
    }
    second = [
        *first,
        {"role": "assistant", "content": None, "tool_calls": [tool_call]},
        {"role": "tool", "tool_call_id": "call_7", "content": "391"},
    ]
    calls = [
        Step(
            prompt_ids=[1, 2, 3],
            response_ids=[10, 11, 12],
            logprobs=[-0.1, -0.5, -2.0],
            messages=first,
            response_text='<tool_call>{"name": "calculator"}</tool_call>',
            reward=1.0,
            advantage=0.8,
        ),
        Step(
            prompt_ids=[1, 2, 3, 10, 11, 12, 4],
            response_ids=[20, 21, 22, 23],
            logprobs=[-0.2, -0.3, -1.5, -0.05],
            response_mask=[0, 1, 1, 1],
            messages=second,
            response_text="The answer is 391.",
            reward=1.0,
            advantage=0.8,
            info={"trainer_logprobs": [-0.2, -0.31, -2.9, -0.06], "drift_at": 9},
        ),
    ]
    episode = Episode(
        task_id="calc-1",
        task={"question": question, "answer": "391"},
        trajectories=[Trajectory(name="solver", steps=calls, reward=1.0)],
        reward=1.0,
        is_correct=True,
    )
    texts = {
        1: "<|im_start|>",
        2: "user",
        3: "\n",
        4: "<|im_start|>",
        10: "<tool_call>",
        11: "calc",
        12: "</tool_call>",
        20: "The",
        21: " answer",
        22: " is",
        23: " 391.",
    }
    run = RunWriter.start(
        store,
        kind="train",
        name="agent",
        config={"trainer": {"name": "agent", "steps": 1}},
        model="tiny",
        task="calc",
    )
    run.stage_episodes(1, [episode], _TableTokenizer(texts))
    run.log(1, {"reward/mean": 1.0})
    run.add_eval_results(
        [
            {
                "task_id": f"calc-{i}",
                "sample": 0,
                "reward": float(i % 2),
                "is_correct": i % 2 == 1,
                "output": f"The answer is {i * 7}.",
                "info": {"expected": str(i * 7 + i % 2)},
            }
            for i in range(6)
        ]
    )
    run.finish({"final_accuracy": 0.5})
    return run.id


class _TableTokenizer:
    """A tokenizer for hand-written episodes: each id's text from a table."""

    def __init__(self, texts: dict[int, str]) -> None:
        self.texts = texts

    def decode(self, ids: list[int]) -> str:
        return "".join(self.texts.get(i, "?") for i in ids)


class Screenshots:
    """Saves full-page screenshots under ``directory`` and, when ``$RLLM_UI_ARTIFACTS`` is set, copies
    them there too (CI keeps that directory)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        artifacts = os.environ.get("RLLM_UI_ARTIFACTS")
        self.artifacts = Path(artifacts) if artifacts else None

    def save(self, page, name: str) -> Path:  # page: playwright.sync_api.Page
        path = self.directory / f"{name}.png"
        # A sticky header would be drawn where the viewport was scrolled to, in the middle of the page.
        page.add_style_tag(content=".topbar { position: static !important; }")
        page.screenshot(path=str(path), full_page=True)
        if self.artifacts is not None:
            self.artifacts.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, self.artifacts / path.name)
        return path
