"""``rllm eval``: run an agent flow over a dataset, k samples per item, and score it.

The flow (built-in or the user's ``@rllm.rollout``) always talks to an embedded model gateway on
loopback, whose upstream is the local engine (``--model``) or any OpenAI-compatible server
(``--base-url``): the same code path in both cases, sampling (temperature, max_tokens, seed) enforced by
the gateway on every call, and every call recorded in ``<output>.traces.db``.

Results go to a JSONL file, one line per (item, sample), appended and flushed as each finishes. An
interrupted eval started again with the same ``--output`` skips what is already there (a sample that
failed with an error is run again); a file from another dataset or model is refused rather than mixed in.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from typing_extensions import Self

from rllm.eval.passk import ks_to_report, mean_pass_at_k
from rllm.gateway.app import create_app
from rllm.gateway.server import GatewayServer, build_upstream
from rllm.gateway.traces import TraceStore
from rllm.inference.base import SamplingParams
from rllm.runner.workflow_runner import WorkflowRunner, task_id_of
from rllm.sdk.workflow import GatewayWorkflow
from rllm.store import RunWriter

logger = logging.getLogger(__name__)


@dataclass
class EvalSpec:
    """What to evaluate and how. ``n`` samples are drawn per item; ``k`` is the pass@k to report."""

    dataset: str
    output: Path
    model: str = "smollm2-135m"
    base_url: str | None = None
    api_key: str | None = None
    split: str = "test"
    max_examples: int | None = None
    k: int = 1
    n: int | None = None  # default: k
    temperature: float | None = None  # default: 0 (greedy) for one sample, 0.6 for several
    top_p: float = 1.0
    max_tokens: int = 1024
    seed: int = 0
    concurrency: int = 32
    timeout_s: float | None = None
    retries: int = 1
    resume: bool = True
    device: str = "auto"
    dtype: str = "auto"
    store: Path | None = None  # record the eval as a run in this run store (docs/ui.md); None = don't

    def __post_init__(self) -> None:
        self.output = Path(self.output)
        self.store = None if self.store is None else Path(self.store)
        if self.n is None:
            self.n = self.k
        if self.k < 1 or self.n < self.k:
            raise ValueError(f"need 1 <= k <= n samples per item, got k={self.k}, n={self.n}")
        if self.temperature is None:
            self.temperature = 0.0 if self.n == 1 else 0.6
        if self.n > 1 and self.temperature == 0.0:
            raise ValueError(
                f"{self.n} greedy samples of an item are one sample {self.n} times: "
                "set a temperature > 0 for pass@k with k > 1"
            )
        if self.max_examples is not None and self.max_examples < 1:
            raise ValueError(f"max_examples must be positive, got {self.max_examples}")
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be positive, got {self.concurrency}")

    @property
    def model_label(self) -> str:
        return f"{self.model}@{self.base_url}" if self.base_url else self.model


@dataclass
class EvalSummary:
    """The eval's headline numbers; ``pass_at`` maps k to pass@k."""

    dataset: str
    model: str
    items: int
    samples_per_item: int
    accuracy: float
    pass_at: dict[int, float]
    mean_reward: float
    failed: int
    wall_s: float
    output: str

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["pass_at"] = {str(k): v for k, v in self.pass_at.items()}
        return data


# ------------------------------------------------------------------------------------------- results


def load_results(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a results file (one JSON object per line; a torn last line from a kill is skipped)."""
    rows = []
    path = Path(path)
    if not path.exists():
        return rows
    with path.open() as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                logger.warning(
                    "%s:%d is not a whole JSON line (an interrupted write?); it is ignored", path, number
                )
    return rows


def _finished(rows: list[dict[str, Any]], spec: EvalSpec) -> dict[tuple[str, int], dict[str, Any]]:
    done: dict[tuple[str, int], dict[str, Any]] = {}
    want = {
        "dataset": spec.dataset,
        "split": spec.split,
        "model": spec.model_label,
        "temperature": spec.temperature,
    }
    for row in rows:
        got = {key: row.get(key) for key in want}
        if got != want:
            raise ValueError(
                f"{spec.output} holds results of another eval ({got}, not {want}): pass another --output "
                "(or --no-resume to start over)"
            )
        if row.get("error") is None:
            done[(row["task_id"], int(row["sample"]))] = row
    return done


def summarize(rows: list[dict[str, Any]], spec: EvalSpec, wall_s: float) -> EvalSummary:
    """Headline numbers over the latest row of each (item, sample); a failed sample counts as wrong."""
    latest: dict[tuple[str, int], dict[str, Any]] = {}
    for row in rows:
        latest[(row["task_id"], int(row["sample"]))] = row
    by_item: dict[str, list[bool]] = defaultdict(list)
    for (task_id, _), row in sorted(latest.items()):
        by_item[task_id].append(bool(row.get("is_correct")))
    n = min((len(v) for v in by_item.values()), default=0)
    flat = list(latest.values())
    pass_at = {k: mean_pass_at_k(list(by_item.values()), k) for k in ks_to_report(n)} if n else {}
    return EvalSummary(
        dataset=spec.dataset,
        model=spec.model_label,
        items=len(by_item),
        samples_per_item=n,
        accuracy=sum(bool(r.get("is_correct")) for r in flat) / len(flat) if flat else 0.0,
        pass_at=pass_at,
        mean_reward=sum(float(r.get("reward") or 0.0) for r in flat) / len(flat) if flat else 0.0,
        failed=sum(r.get("error") is not None for r in flat),
        wall_s=wall_s,
        output=str(spec.output),
    )


# ------------------------------------------------------------------------------------------- running


def _row(spec: EvalSpec, task_id: str, sample: int, episode: Any) -> dict[str, Any]:
    output = episode.info.get("output")
    return {
        "dataset": spec.dataset,
        "split": spec.split,
        "model": spec.model_label,
        "temperature": spec.temperature,
        "task_id": task_id,
        "sample": sample,
        "reward": episode.reward,
        "is_correct": bool(episode.is_correct),
        "output": output if isinstance(output, str) else None,
        "info": _jsonable({k: v for k, v in episode.info.items() if k != "output"}),
        "termination_reason": episode.termination_reason.value,
        "error": episode.error,
        "latency_s": round(episode.metrics.get("episode_time_s", 0.0), 4),
        "session_id": episode.id,
    }


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


def run_eval(
    spec: EvalSpec,
    tasks: list[dict[str, Any]],
    flow: Any,
    evaluator_fn: Any | None = None,
    *,
    show_progress: bool = True,
) -> EvalSummary:
    """Run ``flow`` ``spec.n`` times on each of ``tasks`` (skipping samples already in ``spec.output``),
    append each result to ``spec.output`` as it finishes, and summarise the whole file."""
    if not tasks:
        raise ValueError(f"dataset {spec.dataset!r} split {spec.split!r} has no rows to evaluate")
    ids = [task_id_of(t) for t in tasks]
    if len(set(ids)) != len(ids):
        raise ValueError(
            f"dataset {spec.dataset!r} repeats task ids; resuming needs each item's id to be unique"
        )
    spec.output.parent.mkdir(parents=True, exist_ok=True)
    if not spec.resume and spec.output.exists():
        spec.output.unlink()
    done = _finished(load_results(spec.output), spec)
    todo = [(t, s) for t in tasks for s in range(spec.n) if (task_id_of(t), s) not in done]
    if done:
        logger.info(
            "resuming %s: %d of %d samples already done",
            spec.output,
            len(tasks) * spec.n - len(todo),
            len(tasks) * spec.n,
        )
    run = _open_store_run(spec, list(done.values()))
    try:
        summary = _run(spec, tasks, flow, evaluator_fn, todo, ids, show_progress, run)
    except BaseException as exc:
        if run is not None:
            run.fail(exc)
        raise
    if run is not None:
        run.log(
            0,
            {
                "eval/accuracy": summary.accuracy,
                "eval/mean_reward": summary.mean_reward,
                "eval/n": float(len(ids) * (spec.n or 1)),
                "eval/failed": float(summary.failed),
                **{f"eval/pass@{k}": v for k, v in summary.pass_at.items()},
            },
        )
        run.finish(summary.to_json())
    return summary


def _open_store_run(spec: EvalSpec, done_rows: list[dict[str, Any]]) -> Any:
    """The eval's run in the run store (None without ``spec.store``): a resumed eval continues the run of
    its results file, and rows already in the file are recorded too."""
    if spec.store is None:
        return None

    config = {k: str(v) if isinstance(v, Path) else v for k, v in asdict(spec).items() if k != "api_key"}
    run = RunWriter.start(
        spec.store,
        kind="eval",
        name=f"eval-{spec.dataset}",
        config=config,
        model=spec.model_label,
        task=spec.dataset,
        location=spec.output,
        resume_from_step=0 if spec.resume else None,
    )
    if done_rows:
        run.add_eval_results(done_rows)
    return run


def _run(
    spec: EvalSpec,
    tasks: list[dict[str, Any]],
    flow: Any,
    evaluator_fn: Any | None,
    todo: list[tuple[dict[str, Any], int]],
    ids: list[str],
    show_progress: bool,
    run: Any,
) -> EvalSummary:
    t0 = time.perf_counter()
    if todo:
        jobs = [
            (
                task,
                SamplingParams(
                    temperature=spec.temperature,
                    top_p=spec.top_p,
                    max_tokens=spec.max_tokens,
                    seed=spec.seed + 1_000_003 * sample,
                ),
            )
            for task, sample in todo
        ]
        with _Gateway(spec) as gateway, spec.output.open("a") as fh:
            workflow = GatewayWorkflow(
                flow,
                evaluator_fn,
                gateway_url=gateway.url,
                model=spec.model,
                store=gateway.store,
                merge_turns=False,
            )
            # The flow talks to the gateway, never to an engine of its own: no engine here.
            runner = WorkflowRunner(
                workflow,
                None,
                jobs[0][1],
                show_progress=show_progress,  # type: ignore[arg-type]
                max_concurrency=spec.concurrency,
                timeout_s=spec.timeout_s,
                retries=spec.retries,
            )

            def save(index: int, episode: Any) -> None:
                task, sample = todo[index]
                row = _row(spec, task_id_of(task), sample, episode)
                fh.write(json.dumps(row) + "\n")
                fh.flush()  # a kill loses at most the line being written
                if run is not None:
                    run.add_eval_results([row])

            asyncio.run(runner.run_jobs(jobs, on_episode=save, description=f"eval {spec.dataset}"))
    wanted = set(ids)
    rows = [r for r in load_results(spec.output) if r["task_id"] in wanted and int(r["sample"]) < spec.n]
    summary = summarize(rows, spec, time.perf_counter() - t0)
    spec.output.with_suffix(".summary.json").write_text(json.dumps(summary.to_json(), indent=2) + "\n")
    return summary


class _Gateway:
    """The embedded gateway the flow talks to: the local engine or an OpenAI-compatible upstream behind it."""

    def __init__(self, spec: EvalSpec) -> None:
        self.spec = spec

    def __enter__(self) -> Self:
        spec = self.spec
        try:  # concurrent episodes' calls arrive a few ms apart: the local engine waits 5 ms to batch them
            upstream = build_upstream(
                spec.model,
                [spec.base_url] if spec.base_url else [],
                upstream_model=spec.model,
                upstream_api_key=spec.api_key,
                device=spec.device,
                dtype=spec.dtype,
                batch_wait_ms=5.0,
            )
        except Exception as exc:
            if not spec.base_url:
                raise
            raise ConnectionError(f"no OpenAI-compatible server answers at {spec.base_url}: {exc}") from exc
        self.store = TraceStore(spec.output.with_suffix(".traces.db"))
        self.server = GatewayServer(create_app(upstream, self.store, model_name=spec.model)).start()
        self.url = self.server.url
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()
        self.store.close()
