"""Where training metrics go: a JSONL file, TensorBoard, Weights & Biases, MLflow, the console.

The trainer owns one :class:`MetricsLogger` and calls ``logger.log(step, metrics)`` once per training
step with flat ``{"name": number}`` dicts (``"reward/mean"``, ``"loss"``); the logger hands the same dict
to every sink, and at the end of a completed run hands the final model to the sinks that keep artifacts
(:class:`ArtifactSink`; the trackers in :mod:`rllm.utils.trackers`). Sinks are picked by name in config
(``trainer.loggers: [console, jsonl]``) and built by :func:`build_sinks`. The names live in ``SINKS``, a
:class:`rllm.utils.registry.Registry` of sink factories (docs/plugins.md; entry-point group
``rllm.loggers``). A sink that needs an optional package declares it
(:class:`SinkRequirements`), so a run that names it while the package is missing fails at start-up with the
``pip`` command that fixes it, never silently mid-run.

The JSONL file is the run's source of truth: one line per step, flushed as it is written, read back by
:func:`read_jsonl_metrics` and drawn by :func:`plot_metrics` at the end of a run.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from rich.console import Console
from rich.table import Table

from rllm.utils.registry import Registry
from rllm.utils.trackers import MlflowSink, WandbSink

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = [
    "SINKS",
    "ArtifactSink",
    "ConsoleSink",
    "JsonlSink",
    "MetricsLogger",
    "MetricsSink",
    "MlflowSink",
    "SinkContext",
    "SinkRequirements",
    "TensorBoardSink",
    "WandbSink",
    "build_sinks",
    "mlflow_artifact_dir",
    "mlflow_store",
    "plot_metrics",
    "read_jsonl_metrics",
    "summarize",
]

logger = logging.getLogger(__name__)


@runtime_checkable
class MetricsSink(Protocol):
    """Something that records one dict of scalar metrics per training step."""

    def log(self, step: int, metrics: dict[str, float]) -> None:
        """Record ``metrics`` as the values at training step ``step``."""
        ...

    def close(self) -> None:
        """Flush and release files or connections; the sink is not used afterwards."""
        ...


@runtime_checkable
class ArtifactSink(MetricsSink, Protocol):
    """A sink that also keeps the run's end products (an experiment tracker: W&B, MLflow).

    ``log_final_model`` is the end-of-run hook: called once, after the last step and before ``close``,
    only when the run completes, with the exported final model and the run's ``config.yaml``. A sink
    without it (console, JSONL, TensorBoard, a plug-in that only records metrics) is simply not called:
    the model is in the run directory either way.
    """

    def log_final_model(self, model_dir: Path, config_file: Path) -> None:
        """Store the final model directory and the config file with the run."""
        ...


def _as_floats(metrics: Mapping[str, Any]) -> dict[str, float]:
    """Plain floats from ints, bools, numpy scalars or one-element tensors; anything else is an error."""
    out: dict[str, float] = {}
    for key, value in metrics.items():
        try:
            out[key] = float(value)
        except (TypeError, ValueError) as e:
            raise TypeError(
                f"metric {key!r} must be a number, got {type(value).__name__} {value!r}; "
                "log text and lists elsewhere (e.g. the episode dump)"
            ) from e
    return out


# ------------------------------------------------------------------------------------------------ sinks


class JsonlSink:
    """Appends ``{"step": .., "time": .., **metrics}`` as one JSON line per call to ``path``.

    Each line is flushed as it is written, so a killed run keeps every step it logged. ``time`` is the
    Unix time of the call. Appending (not truncating) lets a resumed run continue the same file.
    Non-finite values are written as ``NaN`` / ``Infinity``, which Python's ``json`` reads back.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a", encoding="utf-8")

    def log(self, step: int, metrics: dict[str, float]) -> None:
        record = {"step": int(step), "time": time.time(), **_as_floats(metrics)}
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()


class TensorBoardSink:
    """Writes each metric as a TensorBoard scalar (tag = metric name) under ``logdir``.

    Events are flushed after every step so ``tensorboard --logdir`` shows a live run.
    """

    def __init__(self, logdir: str | Path) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as e:
            raise ImportError(
                "the 'tensorboard' metrics sink needs the tensorboard package: "
                "pip install 'rllm[tensorboard]' (or drop 'tensorboard' from the metrics sinks)"
            ) from e
        self.logdir = Path(logdir)
        self._writer = SummaryWriter(log_dir=str(self.logdir))

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for key, value in _as_floats(metrics).items():
            self._writer.add_scalar(key, value, global_step=step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


def _format_value(value: float) -> str:
    if math.isnan(value) or math.isinf(value):
        return str(value)
    if value == int(value) and abs(value) < 1e9:
        return str(int(value))
    if abs(value) >= 1e4 or abs(value) < 1e-3:
        return f"{value:.3e}"
    return f"{value:.4f}"


class ConsoleSink:
    """Prints one compact table row per step to a rich console, with a header when the columns change.

    ``keys`` picks and orders the columns (a key missing from a step shows as ``-``); ``None`` shows
    every metric of the step. The header is repeated every ``header_every`` rows so it stays in view.
    """

    def __init__(
        self,
        keys: list[str] | None = None,
        console: Console | None = None,
        header_every: int = 20,
        labels: dict[str, str] | None = None,
    ) -> None:
        self.keys = list(keys) if keys is not None else None
        self.labels = dict(labels or {})
        self.console = console if console is not None else Console()
        self.header_every = header_every
        self._columns: list[str] | None = None
        self._rows_since_header = 0

    def log(self, step: int, metrics: dict[str, float]) -> None:
        values = _as_floats(metrics)
        columns = self.keys if self.keys is not None else list(values)
        show_header = columns != self._columns or self._rows_since_header >= self.header_every
        self._columns = columns
        self._rows_since_header = 0 if show_header else self._rows_since_header
        table = Table(show_header=show_header, box=None, pad_edge=False, header_style="bold")
        table.add_column("step", justify="right", width=6, no_wrap=True)
        widths = [max(len(self.labels.get(k, k)), 9) for k in columns]  # 9 fits "1.234e-05"
        for key, width in zip(columns, widths):  # fixed widths keep rows from different calls aligned
            table.add_column(self.labels.get(key, key), justify="right", width=width, no_wrap=True)
        table.add_row(str(step), *(_format_value(values[k]) if k in values else "-" for k in columns))
        # Never let a narrow (or non-tty, 80-column) console squeeze the columns into ellipses: each
        # column takes its width plus one cell of padding on either side.
        needed = 6 + sum(w + 2 for w in widths) + 1
        self.console.width = max(self.console.width, needed)
        self.console.print(table)
        self._rows_since_header += 1

    def close(self) -> None:
        pass


class MetricsLogger:
    """Hands each step's metrics to every sink; itself a :class:`MetricsSink`, and a context manager.

    If a sink raises, the remaining sinks still get the step (so the JSONL line is not lost), then the
    first error is re-raised: a broken sink stops the run loudly rather than dropping metrics silently.
    """

    def __init__(self, sinks: Iterable[MetricsSink]) -> None:
        self.sinks = list(sinks)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        values = _as_floats(metrics)
        self._each(lambda sink: sink.log(step, values), "log")

    def log_final_model(self, model_dir: Path, config_file: Path) -> None:
        """Hand the completed run's final model and config file to every :class:`ArtifactSink`."""
        keepers = [sink for sink in self.sinks if isinstance(sink, ArtifactSink)]
        for sink in keepers:
            logger.info("logging the final model to %s", type(sink).__name__)
        self._each(lambda sink: sink.log_final_model(model_dir, config_file), "log the final model", keepers)

    def close(self) -> None:
        self._each(lambda sink: sink.close(), "close")

    def _each(self, call: Any, what: str, sinks: list[MetricsSink] | None = None) -> None:
        first_error: BaseException | None = None
        for sink in self.sinks if sinks is None else sinks:
            try:
                call(sink)
            except Exception as e:
                logger.exception("metrics sink %s failed to %s", type(sink).__name__, what)
                first_error = first_error or e
        if first_error is not None:
            raise first_error

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


# ----------------------------------------------------------------------------------------- by name


@dataclass(frozen=True)
class SinkContext:
    """The run a sink factory builds its sink for: where it writes, what it is called, its config."""

    run_dir: Path
    run_name: str
    config: dict[str, Any]
    console_keys: list[str] | dict[str, str] | None = None  # the console's columns (None: every metric)
    wandb_project: str = "rllm"
    wandb_mode: str = "offline"
    mlflow_tracking_uri: str | None = None  # None: SQLite in the run directory (mlflow_store below)
    mlflow_experiment: str = "rllm"


def mlflow_store(run_dir: Path) -> tuple[str, Path]:
    """The MLflow store a run writes when ``trainer.mlflow_tracking_uri`` is null: the tracking URI of
    ``run_dir/mlflow.db`` (SQLite; MLflow 3 refuses its old file store by default) and the artifact
    directory beside it, ``run_dir/mlartifacts``."""
    return f"sqlite:///{Path(run_dir).resolve() / 'mlflow.db'}", Path(run_dir) / "mlartifacts"


def mlflow_artifact_dir(tracking_uri: str) -> Path | None:
    """Where an experiment created in a local SQLite store keeps artifacts: ``mlartifacts/`` beside the
    database file (as in :func:`mlflow_store`; MLflow's own default is the working directory). None for
    any other store: a tracking server decides where its artifacts go."""
    prefix = "sqlite:///"
    if not tracking_uri.startswith(prefix):
        return None
    return Path(tracking_uri[len(prefix) :]).parent / "mlartifacts"


def _mlflow(run: SinkContext) -> MetricsSink:
    uri = run.mlflow_tracking_uri or mlflow_store(run.run_dir)[0]
    return MlflowSink(run.run_name, run.config, uri, run.mlflow_experiment, mlflow_artifact_dir(uri))


@dataclass(frozen=True)
class SinkRequirements:
    """What a sink needs installed: the module it imports, and the command that installs it. A run that
    names the sink without it is refused at start-up (``rllm.trainer.checks``)."""

    module: str
    install: str


SinkFactory = Callable[[SinkContext], MetricsSink]
"""Builds one named sink for a run."""


def _check_factory(name: str, factory: object) -> None:
    if not callable(factory):
        raise TypeError(f"metrics sink {name!r} must be a factory (SinkContext) -> sink, not {factory!r}")


SINKS: Registry[SinkFactory] = Registry(
    "metrics sink", group="rllm.loggers", key="trainer.loggers", check=_check_factory
)
"""Every sink ``trainer.loggers`` can name; the capabilities of one that needs a package are its
:class:`SinkRequirements`."""


def _console(run: SinkContext) -> MetricsSink:
    keys = run.console_keys
    if isinstance(keys, dict):  # metric key -> short column label
        return ConsoleSink(list(keys), labels=keys)
    return ConsoleSink(keys)


SINKS.register("console", _console, description="one table row per step")
SINKS.register(
    "jsonl", lambda run: JsonlSink(run.run_dir / "metrics.jsonl"), description="run_dir/metrics.jsonl"
)
SINKS.register(
    "tensorboard",
    lambda run: TensorBoardSink(run.run_dir / "tensorboard"),
    capabilities=SinkRequirements("tensorboard", "pip install 'rllm[tensorboard]'"),
    description="run_dir/tensorboard/",
)
SINKS.register(
    "wandb",
    lambda run: WandbSink(
        run.wandb_project, run.run_name, run.config, mode=run.wandb_mode, save_dir=run.run_dir
    ),
    capabilities=SinkRequirements("wandb", "pip install 'rllm[wandb]'"),
    description="Weights & Biases (offline unless told otherwise)",
)
SINKS.register(
    "mlflow",
    _mlflow,
    capabilities=SinkRequirements("mlflow", "pip install 'rllm[mlflow]'"),
    description="MLflow (run_dir/mlflow.db unless trainer.mlflow_tracking_uri names a store)",
)


def build_sinks(
    names: list[str],
    run_dir: Path,
    run_name: str,
    config: dict[str, Any],
    *,
    console_keys: list[str] | dict[str, str] | None = None,
    wandb_project: str = "rllm",
    wandb_mode: str = "offline",
    mlflow_tracking_uri: str | None = None,
    mlflow_experiment: str = "rllm",
) -> list[MetricsSink]:
    """The sinks named in config (``SINKS``), writing under ``run_dir``.

    ``"jsonl"`` writes ``run_dir/metrics.jsonl``, ``"tensorboard"`` writes ``run_dir/tensorboard/``,
    ``"wandb"`` logs run ``run_name`` with ``config`` (stored under ``run_dir``), ``"mlflow"`` logs it to
    ``mlflow_tracking_uri`` (None: ``run_dir/mlflow.db``), ``"console"`` prints
    ``console_keys`` (all metrics when None). Names are checked before anything is created; a missing
    optional package raises ImportError with the pip command, and closes the sinks already opened.

    Raises:
        ValueError: an unknown sink name (``UnknownPluginError``, with a did-you-mean).
        ImportError: ``tensorboard``, ``wandb`` or ``mlflow`` is named but its package is not installed.
    """
    wanted = list(dict.fromkeys(n.strip().lower() for n in names))  # dedupe, keep order
    factories = [SINKS.get(name) for name in wanted]  # every name checked before anything is created
    run = SinkContext(
        Path(run_dir),
        run_name,
        config,
        console_keys,
        wandb_project,
        wandb_mode,
        mlflow_tracking_uri,
        mlflow_experiment,
    )
    sinks: list[MetricsSink] = []
    try:
        for factory in factories:
            sinks.append(factory(run))
    except BaseException:
        for sink in sinks:
            sink.close()
        raise
    return sinks


def summarize(values: list[float], prefix: str) -> dict[str, float]:
    """``{prefix}/mean``, ``/std``, ``/min`` and ``/max`` of ``values``; ``{}`` when there are none.

    ``std`` is the population standard deviation, sqrt(sum((x - mean)^2) / n), so one value gives 0.
    """
    if not values:
        return {}
    xs = [float(v) for v in values]
    mean = sum(xs) / len(xs)
    std = math.sqrt(sum((x - mean) ** 2 for x in xs) / len(xs))
    head = f"{prefix}/" if prefix else ""
    return {f"{head}mean": mean, f"{head}std": std, f"{head}min": min(xs), f"{head}max": max(xs)}


# --------------------------------------------------------------------------------------- reading back


def read_jsonl_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The records a :class:`JsonlSink` wrote, in order.

    A truncated last line (the run was killed mid-write) is skipped with a warning; a bad line
    anywhere else raises ValueError naming the line.
    """
    path = Path(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    records: list[dict[str, Any]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as e:
            if number == len(lines):
                logger.warning("skipping truncated last line %d of %s", number, path)
                continue
            raise ValueError(f"{path}:{number} is not a JSON object: {e}") from e
    return records


def plot_metrics(jsonl_path: str | Path, out_png: str | Path, keys: list[str] | None = None) -> Path:
    """Draw one line chart per metric in ``keys`` (against ``step``) into ``out_png``; return its path.

    ``keys=None`` plots every metric. Keys never logged are skipped with a warning; if none of them
    was logged, ValueError lists the ones that were. Uses matplotlib's object API (no pyplot state,
    no display needed).
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as e:
        raise ImportError("plotting metrics needs matplotlib: pip install matplotlib") from e
    records = read_jsonl_metrics(jsonl_path)
    logged = list(dict.fromkeys(k for r in records for k in r if k not in ("step", "time")))
    wanted = logged if keys is None else list(keys)
    missing = [k for k in wanted if k not in logged]
    if missing:
        logger.warning("not plotting %s: never logged in %s", missing, jsonl_path)
    present = [k for k in wanted if k in logged]
    if not present:
        raise ValueError(f"none of the keys {wanted} was logged in {jsonl_path}; logged keys: {logged}")

    fig = Figure(figsize=(7, 2.4 * len(present)), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(present), 1, squeeze=False, sharex=True)[:, 0]
    for ax, key in zip(axes, present):
        points = [(r["step"], r[key]) for r in records if r.get(key) is not None and "step" in r]
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="." if len(points) < 50 else None)
        ax.set_ylabel(key)
        ax.grid(True, alpha=0.3)
    axes[-1].set_xlabel("step")
    out_png = Path(out_png)
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=100)
    return out_png
