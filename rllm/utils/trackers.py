"""Metrics sinks for the experiment trackers people already use: Weights & Biases and MLflow.

Each keeps what a tracker's run page shows: the run's config (W&B's config panel, MLflow's params), one
value per metric per step, and, when the run completes, the final model and ``config.yaml`` as artifacts
(``log_final_model``, the end-of-run hook of :class:`rllm.utils.metrics.ArtifactSink`). Neither needs a
server: W&B runs offline by default (upload later with ``wandb sync``), MLflow writes a SQLite store in the
run directory unless ``trainer.mlflow_tracking_uri`` names another. Both packages are optional extras
(``rllm[wandb]``, ``rllm[mlflow]``), imported when the sink is built; ``trainer.loggers`` naming one that is
not installed is refused at start-up with the pip command.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = ["MlflowSink", "WandbSink", "flatten_config"]


def _floats(metrics: Mapping[str, Any]) -> dict[str, float]:
    return {key: float(value) for key, value in metrics.items()}


def flatten_config(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """``{"trainer": {"steps": 2}}`` as ``{"trainer.steps": "2"}``: nested sections joined with dots, each
    leaf as text (strings as they are, anything else as JSON, so ``null``, ``[console, jsonl]`` and
    ``true`` read as they would in a config file)."""
    flat: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten_config(value, prefix=f"{name}."))
        else:
            flat[name] = value if isinstance(value, str) else json.dumps(value, default=str)
    return flat


class WandbSink:
    """Logs to a Weights & Biases run; ``mode="offline"`` (the default) never touches the network.

    The run's config is the run's config panel; each step's metrics are one history row at that step; the
    final model directory and ``config.yaml`` become one artifact of type ``model``, named
    ``<run name>-final-model``. ``close`` finishes the run with exit code 0 once the final model was
    logged, else 1 (W&B shows it as failed: it stopped before the end). An offline run is stored under
    ``save_dir/wandb/`` (wandb copies artifact files to its staging directory, ``$WANDB_DATA_DIR``, until
    they are synced) and uploaded later with ``wandb sync``.
    """

    def __init__(
        self,
        project: str,
        run_name: str,
        config: dict[str, Any],
        mode: str = "offline",
        save_dir: str | Path | None = None,
    ) -> None:
        if mode not in ("offline", "online"):
            raise ValueError(f"wandb mode must be 'offline' or 'online', got {mode!r}")
        try:
            import wandb
        except ImportError as e:
            raise ImportError(
                "the 'wandb' metrics sink needs the wandb package: "
                "pip install 'rllm[wandb]' (or drop 'wandb' from the metrics sinks)"
            ) from e
        if save_dir is not None:
            Path(save_dir).mkdir(parents=True, exist_ok=True)
        self._wandb = wandb
        self.run_name = run_name
        self._final_model_logged = False
        self._run = wandb.init(
            project=project,
            name=run_name,
            config=config,
            mode=mode,
            dir=None if save_dir is None else str(save_dir),
        )

    @property
    def run_dir(self) -> Path:
        """The run's local directory (``.../wandb/offline-run-*`` offline), with its ``run-*.wandb`` log."""
        return Path(self._run.dir).parent

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self._run.log(_floats(metrics), step=step)

    def log_final_model(self, model_dir: Path, config_file: Path) -> None:
        name = re.sub(r"[^A-Za-z0-9_.-]", "-", self.run_name) + "-final-model"
        artifact = self._wandb.Artifact(name, type="model", metadata={"run": self.run_name})
        artifact.add_dir(str(model_dir), name="final_model")
        artifact.add_file(str(config_file), name="config.yaml")
        self._run.log_artifact(artifact)
        self._final_model_logged = True

    def close(self) -> None:
        self._run.finish(exit_code=0 if self._final_model_logged else 1)


class MlflowSink:
    """Logs to an MLflow run in ``experiment`` at ``tracking_uri``, through ``MlflowClient`` (no global
    active run, so it cannot clash with the user's own ``mlflow.start_run``).

    The config becomes the run's params, flattened (:func:`flatten_config`: ``trainer.steps``, ...; a value
    longer than MLflow's limit is cut to it); each step's metrics are logged at that step; the final model
    directory is the artifact directory ``final_model/`` and ``config.yaml`` sits beside it. ``close`` ends
    the run as FINISHED once the final model was logged, else as KILLED (it stopped before the end). An
    experiment created here keeps its artifacts in ``artifact_dir`` when given (the default store:
    ``<run dir>/mlartifacts``), else where the tracking server puts them.
    """

    def __init__(
        self,
        run_name: str,
        config: Mapping[str, Any],
        tracking_uri: str,
        experiment: str = "rllm",
        artifact_dir: str | Path | None = None,
    ) -> None:
        try:
            from mlflow.entities import Metric, Param
            from mlflow.tracking import MlflowClient
            from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH, MAX_PARAMS_TAGS_PER_BATCH
        except ImportError as e:
            raise ImportError(
                "the 'mlflow' metrics sink needs the mlflow package: "
                "pip install 'rllm[mlflow]' (or drop 'mlflow' from the metrics sinks)"
            ) from e
        self.tracking_uri = tracking_uri
        self._metric = Metric
        self._client = MlflowClient(tracking_uri=tracking_uri)
        found = self._client.get_experiment_by_name(experiment)
        if found is not None:
            experiment_id = found.experiment_id
        else:
            location = None if artifact_dir is None else Path(artifact_dir).resolve().as_uri()
            experiment_id = self._client.create_experiment(experiment, artifact_location=location)
        self.run_id: str = self._client.create_run(experiment_id, run_name=run_name).info.run_id
        params = [Param(k, v[:MAX_PARAM_VAL_LENGTH]) for k, v in flatten_config(config).items()]
        for chunk in _chunks(params, MAX_PARAMS_TAGS_PER_BATCH):
            self._client.log_batch(self.run_id, params=chunk)
        self._final_model_logged = False
        self._closed = False

    def log(self, step: int, metrics: dict[str, float]) -> None:
        now_ms = int(time.time() * 1000)
        batch = [self._metric(key, value, now_ms, int(step)) for key, value in _floats(metrics).items()]
        for chunk in _chunks(batch, 1000):  # MLflow's most metrics per log_batch
            self._client.log_batch(self.run_id, metrics=chunk)

    def log_final_model(self, model_dir: Path, config_file: Path) -> None:
        self._client.log_artifacts(self.run_id, str(model_dir), artifact_path="final_model")
        self._client.log_artifact(self.run_id, str(config_file))
        self._final_model_logged = True

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            status = "FINISHED" if self._final_model_logged else "KILLED"
            self._client.set_terminated(self.run_id, status=status)


def _chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
