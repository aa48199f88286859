"""Metric sinks: JSONL lines survive a kill, TensorBoard writes events, the logger fans out."""

from __future__ import annotations

import importlib.util
import io
import json
from pathlib import Path

import pytest
from ci_support import skip_or_fail
from rich.console import Console

from rllm.trainer.config import TrainConfig
from rllm.trainer.sft_config import SFTConfig
from rllm.utils.metrics import (
    ArtifactSink,
    ConsoleSink,
    JsonlSink,
    MetricsLogger,
    MetricsSink,
    build_sinks,
    mlflow_artifact_dir,
    plot_metrics,
    read_jsonl_metrics,
    summarize,
)
from rllm.utils.trackers import flatten_config

HAS_TENSORBOARD = importlib.util.find_spec("tensorboard") is not None
HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None


class RecordingSink:
    """Keeps what it was given, for fan-out checks."""

    def __init__(self, fail: bool = False) -> None:
        self.logged: list[tuple[int, dict[str, float]]] = []
        self.closed = False
        self.fail = fail

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.logged.append((step, metrics))
        if self.fail:
            raise RuntimeError("sink broke")

    def close(self) -> None:
        self.closed = True


def test_jsonl_lines_are_flushed_before_close(tmp_path: Path) -> None:
    path = tmp_path / "run" / "metrics.jsonl"
    sink = JsonlSink(path)
    sink.log(1, {"reward/mean": 0.5, "loss": 2})
    # Read while the sink is still open: a killed run must already have its line on disk.
    lines = path.read_text().splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert record["step"] == 1 and record["reward/mean"] == 0.5 and record["loss"] == 2.0
    assert isinstance(record["time"], float)
    sink.log(2, {"reward/mean": 0.75})
    sink.close()
    assert [r["step"] for r in read_jsonl_metrics(path)] == [1, 2]


def test_jsonl_appends_for_resumed_runs_and_skips_truncated_tail(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    for step in (1, 2):
        sink = JsonlSink(path)
        sink.log(step, {"x": step})
        sink.close()
    with path.open("a") as f:
        f.write('{"step": 3, "x"')  # killed mid-write
    assert [r["x"] for r in read_jsonl_metrics(path)] == [1.0, 2.0]


def test_non_numeric_metric_is_a_clear_error(tmp_path: Path) -> None:
    sink = JsonlSink(tmp_path / "m.jsonl")
    with pytest.raises(TypeError, match="metric 'text' must be a number"):
        sink.log(0, {"text": "hello"})  # type: ignore[dict-item]
    sink.close()


def test_logger_fans_out_and_closes_every_sink() -> None:
    a, b = RecordingSink(), RecordingSink()
    assert isinstance(a, MetricsSink)
    with MetricsLogger([a, b]) as metrics:
        metrics.log(3, {"acc": 1})
    assert a.logged == b.logged == [(3, {"acc": 1.0})]
    assert a.closed and b.closed


def test_logger_feeds_remaining_sinks_then_raises() -> None:
    broken, healthy = RecordingSink(fail=True), RecordingSink()
    metrics = MetricsLogger([broken, healthy])
    with pytest.raises(RuntimeError, match="sink broke"):
        metrics.log(1, {"acc": 0.5})
    assert healthy.logged == [(1, {"acc": 0.5})]


def test_console_sink_prints_selected_keys() -> None:
    out = io.StringIO()
    sink = ConsoleSink(["reward/mean", "loss"], console=Console(file=out, width=120))
    sink.log(1, {"reward/mean": 0.25, "loss": 1.5, "ignored": 9.0})
    sink.log(2, {"reward/mean": 0.5})
    text = out.getvalue()
    assert "reward/mean" in text and "ignored" not in text
    assert text.count("reward/mean") == 1  # header once while the columns stay the same
    assert "0.2500" in text and "0.5000" in text and "-" in text.splitlines()[-1]


def test_unknown_sink_name_lists_choices(tmp_path: Path) -> None:
    with pytest.raises(
        ValueError,
        match="unknown metrics sink 'neptune': choose one of console, jsonl, mlflow, tensorboard, wandb",
    ):
        build_sinks(["jsonl", "neptune"], tmp_path, "run", {})
    assert not (tmp_path / "metrics.jsonl").exists()  # names are checked before anything is created


def test_build_sinks_console_and_jsonl(tmp_path: Path) -> None:
    sinks = build_sinks(["console", "jsonl", "jsonl"], tmp_path, "run", {})
    assert [type(s).__name__ for s in sinks] == ["ConsoleSink", "JsonlSink"]
    for sink in sinks:
        sink.close()
    assert (tmp_path / "metrics.jsonl").exists()


def test_tensorboard_writes_event_files(tmp_path: Path) -> None:
    if not HAS_TENSORBOARD:  # the test extra has it
        skip_or_fail("tensorboard is not installed: bash scripts/setup.sh")
    (sink,) = build_sinks(["tensorboard"], tmp_path, "run", {})
    sink.log(1, {"reward/mean": 0.5})
    sink.close()
    events = list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    assert events and events[0].stat().st_size > 0


def test_wandb_missing_package_names_pip_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "wandb", None)  # makes the import fail, installed or not
    with pytest.raises(ImportError, match=r"pip install 'rllm\[wandb\]'"):
        build_sinks(["jsonl", "wandb"], tmp_path, "run", {})


def test_tensorboard_missing_package_names_pip_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # makes the import fail
    with pytest.raises(ImportError, match=r"pip install 'rllm\[tensorboard\]'"):
        build_sinks(["tensorboard"], tmp_path, "run", {})


class KeepingSink(RecordingSink):
    """A sink that also keeps the final model (an ArtifactSink)."""

    def __init__(self) -> None:
        super().__init__()
        self.final: list[tuple[Path, Path]] = []

    def log_final_model(self, model_dir: Path, config_file: Path) -> None:
        self.final.append((model_dir, config_file))


def test_final_model_goes_only_to_sinks_that_keep_artifacts(tmp_path: Path) -> None:
    plain, keeper = RecordingSink(), KeepingSink()
    assert isinstance(keeper, ArtifactSink) and not isinstance(plain, ArtifactSink)
    with MetricsLogger([plain, keeper]) as metrics:
        metrics.log(1, {"acc": 1})
        metrics.log_final_model(tmp_path / "final_model", tmp_path / "config.yaml")
    assert keeper.final == [(tmp_path / "final_model", tmp_path / "config.yaml")]
    assert plain.closed and keeper.closed


def test_mlflow_missing_package_names_pip_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    for module in ("mlflow", "mlflow.entities", "mlflow.tracking"):  # makes the import fail, even if done
        monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(ImportError, match=r"pip install 'rllm\[mlflow\]'"):
        build_sinks(["jsonl", "mlflow"], tmp_path, "run", {})


def test_flatten_config_joins_sections_and_writes_leaves_as_config_text() -> None:
    config = {"trainer": {"steps": 2, "loggers": ["jsonl", "mlflow"], "store": None}, "model": {"path": "m"}}
    assert flatten_config(config) == {
        "trainer.steps": "2",
        "trainer.loggers": '["jsonl", "mlflow"]',
        "trainer.store": "null",
        "model.path": "m",
    }


def test_mlflow_artifacts_sit_beside_a_local_store() -> None:
    assert mlflow_artifact_dir("sqlite:////data/runs/mlflow.db") == Path("/data/runs/mlartifacts")
    assert mlflow_artifact_dir("http://tracking:5000") is None


@pytest.mark.parametrize("config", [TrainConfig, SFTConfig])
@pytest.mark.parametrize(
    ("key", "value", "sink"),
    [
        ("wandb_project", "mine", "wandb"),
        ("wandb_mode", "online", "wandb"),
        ("mlflow_experiment", "x", "mlflow"),
    ],
)
def test_a_tracker_option_without_its_logger_is_refused(
    config: type, key: str, value: str, sink: str
) -> None:
    with pytest.raises(ValueError, match=f"trainer.{key} applies to the {sink} logger only: add {sink}"):
        config.model_validate({"trainer": {"loggers": ["jsonl"], key: value}})
    config.model_validate({"trainer": {"loggers": ["jsonl", sink], key: value}})  # with it, accepted


def test_summarize() -> None:
    stats = summarize([1.0, 2.0, 3.0, 4.0], "reward")
    assert stats == pytest.approx(
        {"reward/mean": 2.5, "reward/std": 1.118033988, "reward/min": 1.0, "reward/max": 4.0}
    )
    assert summarize([], "reward") == {}


def test_plot_metrics_writes_png(tmp_path: Path) -> None:
    if not HAS_MATPLOTLIB:  # a dependency of rllm
        skip_or_fail("matplotlib is not installed: bash scripts/setup.sh")
    path = tmp_path / "metrics.jsonl"
    sink = JsonlSink(path)
    for step in range(5):
        sink.log(step, {"reward/mean": step / 4, "acc": 0.1 * step})
    sink.close()
    out = plot_metrics(path, tmp_path / "plots" / "curves.png", ["reward/mean", "acc", "never"])
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="logged keys"):
        plot_metrics(path, tmp_path / "x.png", ["never"])
