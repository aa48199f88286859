"""The W&B and MLflow sinks for real: a two-step `rllm train` on the tiny model with each, read back with the
tracker's own tools (W&B: `wandb leet inspect --json` on the offline run's transaction log; MLflow:
``MlflowClient`` on the run's store). Each run must hold the config, every step's metrics as the JSONL file
has them, and the final model and config.yaml as artifacts.

The extras tier of .ci/run installs both (rllm[wandb,mlflow]) and sets RLLM_TEST_EXTRAS=wandb,mlflow, so a
missing package fails there; elsewhere these tests skip.
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ci_support import require_import
from example_support import step_records, tiny_train_overrides

from rllm.cli.main import main
from rllm.utils.metrics import MetricsLogger, build_sinks, mlflow_store

MODEL_FILES = {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}


def _train(tiny_model_dir: Path, runs: Path, name: str, *overrides: str) -> Path:
    args = [
        *tiny_train_overrides(tiny_model_dir, runs),
        "algorithm.filters.drop_zero_variance=false",  # the tiny model's groups often tie: train anyway
        f"trainer.name={name}",
        *overrides,
    ]
    assert main(["train", *args]) == 0
    return runs / name


def _md5_b64(path: Path) -> str:
    return base64.b64encode(hashlib.md5(path.read_bytes()).digest()).decode()


def _wandb_records(wandb_run_dir: Path) -> list[dict[str, Any]]:
    """The offline run's transaction log, record by record, as wandb's own inspector prints it."""
    cli = Path(sys.executable).parent / "wandb"
    proc = subprocess.run(
        [str(cli), "leet", "inspect", "--json", str(wandb_run_dir)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def test_wandb_offline_run_has_config_metrics_and_final_model(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_import("wandb", "pip install 'rllm[wandb]'", extra="wandb")
    for var in ("WANDB_DATA_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR"):  # nothing written outside tmp
        monkeypatch.setenv(var, str(tmp_path / var.lower()))
    monkeypatch.delenv("WANDB_MODE", raising=False)
    run_dir = _train(
        tiny_model_dir,
        tmp_path / "runs",
        "wb",
        "trainer.loggers=[jsonl,wandb]",
        "trainer.wandb_project=rllm-test",
    )
    (offline,) = (run_dir / "wandb").glob("offline-run-*")  # offline: nothing left the machine
    records = _wandb_records(offline)
    by_type: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_type.setdefault(record["type"], []).append(record)

    (run,) = by_type["run"]
    assert run["run"]["project"] == "rllm-test" and run["run"]["display_name"] == "wb"
    config = run["run"]["config"]["update"]
    assert config["trainer"]["steps"] == 2 and config["trainer"]["loggers"] == ["jsonl", "wandb"]
    assert config["model"]["path"] == str(tiny_model_dir)

    # Every training step's metrics, at its step, with the values the JSONL file has.
    history = {r["history"]["step"]["num"]: r["history"]["item"] for r in by_type["history"]}
    steps = step_records(run_dir)
    assert [r["step"] for r in steps] == [1, 2]
    for record in steps:
        logged = {k: v for k, v in record.items() if k not in ("step", "time")}
        assert "train/loss" in logged and "reward/mean" in logged
        row = history[int(record["step"])]
        assert {k: row[k] for k in logged} == pytest.approx(logged)

    (artifact,) = (r["artifact"] for r in by_type["artifact"])
    assert artifact["type"] == "model" and artifact["name"] == "wb-final-model"
    files = {entry["path"]: entry for entry in artifact["manifest"]["contents"]}
    assert {f"final_model/{name}" for name in MODEL_FILES} <= set(files)
    assert "config.yaml" in files
    weights = files["final_model/model.safetensors"]
    assert weights["digest"] == _md5_b64(run_dir / "final_model" / "model.safetensors")
    assert Path(weights["local_path"]).is_file()  # staged for `wandb sync`, under WANDB_DATA_DIR
    assert Path(weights["local_path"]).is_relative_to(tmp_path)
    assert [r["exit"]["exit_code"] for r in by_type["exit"]] == [0]


def _mlflow_client(tracking_uri: str) -> Any:
    tracking = require_import("mlflow.tracking", "pip install 'rllm[mlflow]'", extra="mlflow")
    return tracking.MlflowClient(tracking_uri=tracking_uri)


def test_mlflow_run_has_params_metric_history_and_final_model(tiny_model_dir: Path, tmp_path: Path) -> None:
    require_import("mlflow", "pip install 'rllm[mlflow]'", extra="mlflow")
    run_dir = _train(tiny_model_dir, tmp_path / "runs", "ml", "trainer.loggers=[jsonl,mlflow]")
    uri, artifacts = mlflow_store(run_dir)
    client = _mlflow_client(uri)
    experiment = client.get_experiment_by_name("rllm")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == "ml" and run.info.status == "FINISHED"

    params = run.data.params
    assert params["trainer.steps"] == "2" and params["trainer.name"] == "ml"
    assert params["model.path"] == str(tiny_model_dir)
    assert json.loads(params["trainer.loggers"]) == ["jsonl", "mlflow"]
    assert params["trainer.mlflow_tracking_uri"] == "null"

    steps = step_records(run_dir)
    for key in ("reward/mean", "train/loss", "time/step_s"):
        history = client.get_metric_history(run.info.run_id, key)
        assert [(m.step, m.value) for m in history] == [
            (int(r["step"]), pytest.approx(r[key])) for r in steps
        ], key

    top = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert top == {"config.yaml", "final_model"}
    model_files = {Path(a.path).name for a in client.list_artifacts(run.info.run_id, "final_model")}
    assert MODEL_FILES <= model_files
    fetched = Path(
        client.download_artifacts(run.info.run_id, "final_model/model.safetensors", str(tmp_path / "dl"))
    )
    assert fetched.read_bytes() == (run_dir / "final_model" / "model.safetensors").read_bytes()
    assert artifacts.is_dir() and artifacts.is_relative_to(run_dir)


def test_mlflow_tracking_uri_and_experiment_are_used_and_an_unfinished_run_is_killed(tmp_path: Path) -> None:
    require_import("mlflow", "pip install 'rllm[mlflow]'", extra="mlflow")
    uri = f"sqlite:///{tmp_path / 'shared.db'}"
    model = tmp_path / "model"
    model.mkdir()
    (model / "weights.bin").write_bytes(b"\x00\x01")
    config_file = tmp_path / "config.yaml"
    config_file.write_text("trainer:\n  steps: 1\n")
    sinks = build_sinks(
        ["mlflow"],
        tmp_path / "run",
        "done",
        {"trainer": {"steps": 1}},
        mlflow_tracking_uri=uri,
        mlflow_experiment="exp",
    )
    with MetricsLogger(sinks) as metrics:
        metrics.log(1, {"reward/mean": 0.25})
        metrics.log_final_model(model, config_file)
    with MetricsLogger(
        build_sinks(
            ["mlflow"], tmp_path / "run", "stopped", {}, mlflow_tracking_uri=uri, mlflow_experiment="exp"
        )
    ) as metrics:
        metrics.log(1, {"reward/mean": 0.5})  # closed before the end: no final model

    # The store named, not the run directory's; artifacts beside its database file.
    assert not (tmp_path / "run" / "mlflow.db").exists()
    assert (tmp_path / "mlartifacts").is_dir()
    client = _mlflow_client(uri)
    experiment = client.get_experiment_by_name("exp")
    runs = {r.info.run_name: r for r in client.search_runs([experiment.experiment_id])}
    assert runs["done"].info.status == "FINISHED" and runs["stopped"].info.status == "KILLED"
    assert runs["done"].data.params == {"trainer.steps": "1"}
    assert runs["done"].data.metrics == {"reward/mean": 0.25}
    assert {a.path for a in client.list_artifacts(runs["done"].info.run_id, "final_model")} == {
        "final_model/weights.bin"
    }
    assert client.list_artifacts(runs["stopped"].info.run_id) == []
