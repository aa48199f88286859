"""The ``rllm`` command line: config errors are one line and exit 2 at start-up; the summary; entry points.

Most tests call ``main([...])`` in-process (fast); the console script and ``python -m rllm`` each get one
subprocess test. A test that would train swaps in a fake trainer, except the slow end-to-end one.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import ClassVar

import pytest
from ci_support import skip_or_fail

import rllm
from rllm.cli.main import main
from rllm.cli.train_cmd import format_summary, split_config_args
from rllm.trainer import agent_trainer
from rllm.trainer.agent_trainer import TrainResult
from rllm.trainer.backends.base import UnsupportedConfigError
from rllm.trainer.config import TrainConfig
from rllm.utils.config import ConfigError, load_config

REPO = Path(__file__).resolve().parents[1]


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    """The single stderr line of a refused command (asserting there is exactly one, and no traceback)."""
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("rllm: error: ")
    assert captured.out == ""
    return lines[0]


@pytest.fixture
def no_training(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if a refused config gets as far as training (loading models)."""

    def train(self: agent_trainer.AgentTrainer) -> TrainResult:
        raise AssertionError("the config should have been refused at start-up")

    monkeypatch.setattr(agent_trainer.AgentTrainer, "train", train)


# --- rllm train: start-up errors ------------------------------------------------------------------


def test_help_config_lists_every_key(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--help-config"]) == 0
    out = capsys.readouterr().out
    assert any(line.startswith("trainer.steps ") for line in out.splitlines())
    assert "algorithm.loss.name" in out


def test_unknown_key_suggests_the_right_one(capsys: pytest.CaptureFixture[str], no_training: None) -> None:
    assert main(["train", "trainer.stepz=3"]) == 2
    assert "did you mean 'trainer.steps'" in _one_line_error(capsys)


def test_missing_model_path_fails_at_start_up(
    capsys: pytest.CaptureFixture[str], no_training: None, tmp_path: Path
) -> None:
    assert main(["train", "model.path=/nonexistent/dir", f"trainer.run_dir={tmp_path}"]) == 2
    assert "/nonexistent/dir" in _one_line_error(capsys)
    assert not any(tmp_path.iterdir()), "nothing is written for a refused config"


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["lora.enabled=true", "backend.gradient_checkpointing=true", "lora.dropout=0.1"], "lora.dropout"),
        (["algorithm.loss.tis_cap=2"], "backend.old_logprobs=recompute"),
        (["trainer.steps=0"], "trainer.steps"),
        (["data.task=nope"], "data.task='nope' is not a known dataset"),
        (["trainer.steps"], "not of the form key=value"),
        (["missing.yaml"], "config file 'missing.yaml' not found"),
    ],
)
def test_unusable_config_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], no_training: None, overrides: list[str], expected: str
) -> None:
    assert main(["train", *overrides]) == 2
    assert expected in _one_line_error(capsys)


def test_yaml_file_and_overrides_are_split() -> None:
    assert split_config_args([]) == (None, [])
    assert split_config_args(["a=1", "run.yml", "b=x.yaml"]) == ("run.yml", ["a=1", "b=x.yaml"])
    assert split_config_args(["c.YAML"]) == ("c.YAML", [])
    with pytest.raises(ConfigError, match="more than one config file"):
        split_config_args(["c.yaml", "d.yml"])


def test_example_config_is_the_defaults() -> None:
    assert load_config(TrainConfig, REPO / "examples/configs/larger_lora.yaml") == TrainConfig()


# --- rllm train: the run and its summary (fake trainer) ------------------------------------------


class FakeTrainer:
    """Stands in for AgentTrainer: records the config, 'trains' instantly."""

    configs: ClassVar[list[TrainConfig]] = []
    error: ClassVar[Exception | None] = None

    def __init__(self, config: TrainConfig) -> None:
        self.configs.append(config)
        self.run_dir = Path(config.trainer.run_dir) / config.trainer.name
        self.test_tasks = [{}] * config.data.test_size

    def train(self) -> TrainResult:
        if self.error is not None:
            raise self.error
        return TrainResult(
            run_dir=self.run_dir,
            steps=3,
            initial_accuracy=0.415,
            final_accuracy=0.78,
            final_model_dir=self.run_dir / "final_model",
        )


@pytest.fixture
def fake_trainer(monkeypatch: pytest.MonkeyPatch) -> type[FakeTrainer]:
    monkeypatch.setattr(FakeTrainer, "configs", [])
    monkeypatch.setattr(agent_trainer, "AgentTrainer", FakeTrainer)
    return FakeTrainer


def test_train_applies_yaml_then_overrides_and_prints_summary(
    capsys: pytest.CaptureFixture[str], fake_trainer: type[FakeTrainer], tmp_path: Path
) -> None:
    config_file = tmp_path / "run.yaml"
    config_file.write_text("trainer:\n  steps: 7\n  name: from-yaml\n")
    code = main(["train", str(config_file), "trainer.steps=3", f"trainer.run_dir={tmp_path}"])
    assert code == 0
    (config,) = fake_trainer.configs
    assert (config.trainer.steps, config.trainer.name) == (3, "from-yaml")
    out = capsys.readouterr().out
    assert "41.5%  (83 of 200 tasks)" in out
    assert "78.0%  (156 of 200 tasks)" in out
    assert "+36.5 points" in out
    run_dir = tmp_path / "from-yaml"
    assert f"run directory      {run_dir}" in out
    assert f"final model        {run_dir / 'final_model'}" in out
    assert f"metrics            {run_dir / 'metrics.jsonl'}" in out


def test_existing_run_is_refused_in_one_line(
    capsys: pytest.CaptureFixture[str], fake_trainer: type[FakeTrainer], monkeypatch: pytest.MonkeyPatch
) -> None:
    error = UnsupportedConfigError("run directory runs/default already has checkpoints")
    monkeypatch.setattr(FakeTrainer, "error", error)
    assert main(["--log-level", "warning", "train"]) == 2
    assert "already has checkpoints" in _one_line_error(capsys)


def test_summary_without_evals_says_why() -> None:
    result = TrainResult(run_dir=Path("runs/x"), steps=5)
    text = format_summary(result, num_test_tasks=10, metrics_path=None)
    assert "not measured (eval.before=false)" in text
    assert "not measured (eval.after=false)" in text
    assert "points" not in text
    assert "not written (add jsonl to trainer.loggers)" in text


def test_accuracy_line_of_the_example_scripts() -> None:
    """What examples/*/train.py print: an eval left off reads "not measured" instead of failing to format."""
    result = TrainResult(run_dir=Path("runs/x"), steps=1)
    assert result.accuracy_line() == "held-out accuracy: not measured -> not measured"
    result.initial_accuracy, result.final_accuracy = 0.03, 0.935
    assert result.accuracy_line() == "held-out accuracy: 3.0% -> 93.5%"


def test_main_leaves_logging_as_it_found_it(capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    before = (list(root.handlers), root.level, logging.getLogger("transformers").level)
    assert main(["--log-level", "debug", "train", "--help-config"]) == 0
    assert (list(root.handlers), root.level, logging.getLogger("transformers").level) == before


# --- other commands and entry points ----------------------------------------------------------


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["version"]) == 0
    assert capsys.readouterr().out == f"rllm {rllm.__version__}\n"


def test_lazy_exports_resolve_and_import_rllm_stays_light() -> None:
    code = (
        "import sys, rllm; assert 'torch' not in sys.modules, 'import rllm loaded torch'; "
        "print(rllm.Step.__module__, rllm.Outcome.__name__, rllm.load_config.__name__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["rllm.types", "Outcome", "load_config"]
    for name in rllm.__all__:
        assert getattr(rllm, name) is not None
    with pytest.raises(AttributeError):
        rllm.NoSuchThing  # noqa: B018


def test_python_dash_m_rllm_help() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "rllm", "--help"], capture_output=True, text=True, cwd=REPO, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert (
        "{init,train,sft,eval,replay,ui,gateway,serve,model,dataset,check-template,profile,version}"
        in proc.stdout
    )


def test_console_script_reports_errors_in_one_line() -> None:
    script = Path(sys.executable).with_name("rllm")
    if not script.exists():
        skip_or_fail(f"console script not installed next to {sys.executable}: bash scripts/setup.sh")
    version = subprocess.run([script, "version"], capture_output=True, text=True, check=True)
    assert version.stdout == f"rllm {rllm.__version__}\n"
    proc = subprocess.run([script, "train", "trainer.stepz=3"], capture_output=True, text=True, check=False)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "rllm: error: unknown config key 'trainer.stepz' — did you mean 'trainer.steps' or 'trainer.store'?"
    ]


# --- end to end (slow) -------------------------------------------------------------------------


@pytest.mark.slow
def test_train_end_to_end_on_a_tiny_model(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from rllm.models import make_tiny_llama

    model = make_tiny_llama(tmp_path / "tiny")
    code = main(
        [
            "train",
            f"model.path={model}",
            f"trainer.run_dir={tmp_path / 'runs'}",
            "trainer.name=e2e",
            "trainer.steps=1",
            "rollout.batch_size=2",
            "rollout.group_size=2",
            "rollout.max_tokens=4",
            "eval.max_tokens=4",
            "data.train_size=8",
            "data.test_size=4",
            "trainer.plot=false",
            "algorithm.filters.drop_zero_variance=false",
            "backend.device=cpu",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    run_dir = tmp_path / "runs" / "e2e"
    assert "of 4 tasks" in out and str(run_dir / "final_model") in out
    assert (run_dir / "metrics.jsonl").is_file() and (run_dir / "final_model").is_dir()


def test_sigterm_unwinds_then_exits_143_without_finalization(tmp_path: Path) -> None:
    """`rllm train`'s SIGTERM handler runs the `finally` blocks, then exits 143 at once: atexit handlers and
    interpreter finalization (where C extensions such as Ray's can crash after a signal) do not run."""
    script = tmp_path / "job.py"
    script.write_text(
        textwrap.dedent(f"""
        import atexit, os, signal, time
        from pathlib import Path
        from rllm.cli.train_cmd import _sigterm_unwinds
        atexit.register(lambda: Path({str(tmp_path / "atexit")!r}).write_text('ran'))
        with _sigterm_unwinds():
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(30)
            finally:
                Path({str(tmp_path / "finally")!r}).write_text('ran')
        print('not reached')
    """)
    )
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 143, proc.stderr
    assert (tmp_path / "finally").exists()
    assert not (tmp_path / "atexit").exists()
    assert "not reached" not in proc.stdout
