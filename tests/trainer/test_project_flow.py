"""A project's own code and tasks named in the config (rllm.trainer.project): workflow.name=flow with
workflow.flow=module:attribute, data.train_file / test_file, and ./rllm.yaml picked up by `rllm train`.
Every refusal is one line that says what to fix, before any model loads."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rllm.cli.main import main
from rllm.sdk.decorators import Rollout
from rllm.trainer import agent_trainer
from rllm.trainer.agent_trainer import AgentTrainer, TrainResult
from rllm.trainer.backends.base import UnsupportedConfigError
from rllm.trainer.config import TrainConfig
from rllm.trainer.project import config_tasks, find_project_config, load_flow
from rllm.utils.config import ConfigError, load_config
from rllm.utils.imports import ObjectNotFoundError

FLOWS = """
import rllm

async def solve(task, ctx):
    return rllm.Outcome(reward=1.0)

@rllm.rollout
def agent(task, config):
    return "1"

@rllm.evaluator
def grade(task, episode):
    return 1.0

def plain(task, ctx):
    return 1.0

def not_decorated(task, episode):
    return 1.0

class Workflow:
    async def __call__(self, task, ctx):
        return rllm.Outcome(reward=1.0)

workflow = Workflow()
NUMBER = 3
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A project directory with a flows module and task files, as the working directory; the module is
    forgotten afterwards so each test imports its own."""
    (tmp_path / "projflows.py").write_text(FLOWS)
    for split, n in (("train", 6), ("test", 3)):
        rows = [{"question": f"{split} {i}?", "ground_truth": str(i)} for i in range(n)]
        (tmp_path / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    yield tmp_path
    sys.modules.pop("projflows", None)


def _config(*overrides: str) -> TrainConfig:
    files = ["data.train_file=train.jsonl", "data.test_file=test.jsonl"]
    return load_config(TrainConfig, None, ["workflow.name=flow", *files, *overrides])


def test_each_kind_of_flow_loads(project: Path) -> None:
    flow, evaluator = load_flow(_config("workflow.flow=projflows:solve"))
    assert flow.__name__ == "solve" and evaluator is None
    flow, evaluator = load_flow(
        _config("workflow.flow=projflows:agent", "workflow.evaluator=projflows:grade")
    )
    assert isinstance(flow, Rollout) and evaluator.name == "grade"
    assert type(load_flow(_config("workflow.flow=projflows:workflow"))[0]).__name__ == "Workflow"
    # path.py:attribute works too, from anywhere
    assert load_flow(_config(f"workflow.flow={project / 'projflows.py'}:solve"))[0].__name__ == "solve"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["workflow.flow=nosuchmodule:solve"], "no module named 'nosuchmodule' importable from"),
        (["workflow.flow=projflows:solv"], "projflows has no attribute 'solv' (it defines"),
        (["workflow.flow=projflows:NUMBER"], "is a int, not a flow"),
        (["workflow.flow=projflows:Workflow"], "is a type, not a flow"),
        (["workflow.flow=projflows:plain"], "is a plain function: decorate it with @rllm.rollout"),
        (
            ["workflow.flow=projflows:solve", "workflow.evaluator=projflows:grade"],
            "goes with an @rllm.rollout",
        ),
        (["workflow.flow=projflows:agent", "workflow.evaluator=projflows:not_decorated"], "not decorated"),
        (["workflow.flow=missing.py:solve"], "missing.py does not exist"),
    ],
)
def test_a_flow_that_cannot_run_is_refused_clearly(project: Path, overrides: list[str], message: str) -> None:
    with pytest.raises(ObjectNotFoundError, match="^workflow") as err:
        load_flow(_config(*overrides))
    assert message in str(err.value)


def test_the_import_path_is_checked_when_the_config_loads() -> None:
    with pytest.raises(ConfigError, match="should be module:attribute"):
        load_config(TrainConfig, None, ["workflow.name=flow", "workflow.flow=agent.solve"])
    with pytest.raises(ConfigError, match="workflow.flow"):
        load_config(TrainConfig, None, ["workflow.name=flow"])  # the flow is required


def test_task_files_replace_the_datasets_splits(project: Path) -> None:
    config = _config("workflow.flow=projflows:solve", "data.train_size=4")
    train, test = config_tasks(config, "train"), config_tasks(config, "test")
    assert [t["question"] for t in train] == ["train 0?", "train 1?", "train 2?", "train 3?"]
    assert [t["ground_truth"] for t in test] == ["0", "1", "2"]


def test_missing_task_file_and_unscored_files_are_refused_at_start_up(project: Path) -> None:
    with pytest.raises(
        UnsupportedConfigError, match=r"data.test_file='nope.jsonl': no such file \(relative to"
    ):
        AgentTrainer(_config("workflow.flow=projflows:solve", "data.test_file=nope.jsonl"))
    files = ["data.train_file=train.jsonl", "data.test_file=test.jsonl"]
    with pytest.raises(
        UnsupportedConfigError, match="name no reward for workflow.name=single_turn: set data.reward"
    ):
        AgentTrainer(load_config(TrainConfig, None, files))
    with pytest.raises(UnsupportedConfigError, match="did you mean 'number'"):
        AgentTrainer(load_config(TrainConfig, None, [*files, "data.reward=numbr"]))


def test_a_flow_in_the_config_and_one_passed_in_are_refused(project: Path) -> None:
    async def other(task: dict, ctx: object) -> float:
        return 0.0

    with pytest.raises(UnsupportedConfigError, match="drop one"):
        AgentTrainer(_config("workflow.flow=projflows:solve"), workflow=other)


@pytest.fixture
def no_training(monkeypatch: pytest.MonkeyPatch) -> list[AgentTrainer]:
    """Record the trainer `rllm train` built instead of training (no model loads)."""
    built: list[AgentTrainer] = []

    def train(self: AgentTrainer) -> TrainResult:
        built.append(self)
        return TrainResult(run_dir=self.run_dir, steps=0)

    monkeypatch.setattr(agent_trainer.AgentTrainer, "train", train)
    monkeypatch.setattr(agent_trainer, "resolve_model", lambda path: Path(path))
    return built


def test_rllm_train_reads_the_projects_rllm_yaml(
    project: Path, no_training: list[AgentTrainer], capsys: pytest.CaptureFixture[str]
) -> None:
    assert find_project_config() is None
    (project / "rllm.yaml").write_text(
        "workflow: {name: flow, flow: 'projflows:solve'}\n"
        "data: {train_file: train.jsonl, test_file: test.jsonl}\ntrainer: {steps: 2, name: proj}\n"
    )
    assert find_project_config() == Path("rllm.yaml")
    assert main(["train", "trainer.steps=3", "trainer.loggers=[console]"]) == 0
    (trainer,) = no_training
    assert trainer.cfg.trainer.name == "proj" and trainer.cfg.trainer.steps == 3  # the file, then overrides
    assert trainer.workflow.__name__ == "solve" and len(trainer.train_tasks) == 6
    # a config file on the command line wins over ./rllm.yaml
    (project / "other.yaml").write_text("trainer: {name: other}\n")
    assert main(["train", "other.yaml", "trainer.loggers=[console]"]) == 0
    assert no_training[1].cfg.trainer.name == "other" and no_training[1].cfg.workflow.name == "single_turn"


def test_rllm_train_reports_a_broken_project_flow_in_one_line(
    project: Path, no_training: list[AgentTrainer], capsys: pytest.CaptureFixture[str]
) -> None:
    (project / "rllm.yaml").write_text(
        "workflow: {name: flow, flow: 'projflows:sovle'}\ndata: {train_file: train.jsonl, test_file: test.jsonl}\n"
    )
    assert main(["train"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(
        "rllm: error: workflow.flow 'projflows:sovle': projflows has no attribute 'sovle'"
    )
    assert not no_training
