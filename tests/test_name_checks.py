"""Every name a config gives is refused at start-up when no registry holds it: one line, with did-you-mean,
before the model or any dataset loads (``rllm train``, ``AgentTrainer(config)`` and ``rllm eval``).

The evidence that nothing loaded: ``model.path``/``--model`` name a directory that does not exist (resolving
it would be refused with a different message), loading a dataset or training trips an assertion, and the
run directory stays empty.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from rllm.cli.main import main
from rllm.data.catalog import CATALOG
from rllm.data.registry import DatasetRegistry, builtin_datasets
from rllm.rewards import registry as rewards
from rllm.trainer import agent_trainer
from rllm.trainer.config import TrainConfig

REPO = Path(__file__).resolve().parents[1]
MISSING_MODEL = "/nonexistent/model-dir"


@pytest.fixture
def nothing_loads(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A private dataset registry, and a test failure if a dataset loads or training starts; returns the
    run directory a refused config must leave empty."""

    def trip(*args: object, **kwargs: object) -> None:
        raise AssertionError("the name should have been refused before anything loads")

    monkeypatch.setenv("RLLM_DATASETS_DIR", str(tmp_path / "datasets"))
    monkeypatch.setattr(DatasetRegistry, "load", trip)
    monkeypatch.setattr(agent_trainer.AgentTrainer, "train", trip)
    runs = tmp_path / "runs"
    runs.mkdir()
    return runs


def _one_line(capsys: pytest.CaptureFixture[str], prefix: str) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith(prefix), lines[0]
    return lines[0]


@pytest.mark.parametrize(
    ("override", "suggestion"),
    [
        ("algorithm.advantage=grop", "grpo"),
        ("algorithm.advantage={default: grpo, solver: rlo}", "rloo"),
        ("algorithm.loss.name=gspoo", "gspo"),
        ("algorithm.loss.agg=token-man", "token-mean"),
        ("algorithm.loss.kl_estimator=k33", "k3"),
        ("algorithm.std=sampel", "sample"),
        ("algorithm.credit=per_stepp", "per_step"),
        ("workflow.name=tool_agnet", "tool_agent"),
        (("workflow.name=tool_agent", "workflow.tools=[calculator, pyton]"), "python"),
        ("trainer.loggers=[console, jsnl]", "jsonl"),
        ("backend.name=distribute", "distributed"),
        ("inference.engine=vlm", "vllm"),
        ("data.task=larjer", "larger"),
        ("data.test_split=tset", "test"),
        ("data.reward=mathh", "math"),
    ],
)
def test_rllm_train_refuses_an_unknown_name_before_anything_loads(
    capsys: pytest.CaptureFixture[str], nothing_loads: Path, override: str | tuple[str, ...], suggestion: str
) -> None:
    overrides = override if isinstance(override, tuple) else (override,)  # the misspelt one comes last
    code = main(["train", *overrides, f"model.path={MISSING_MODEL}", f"trainer.run_dir={nothing_loads}"])
    assert code == 2
    line = _one_line(capsys, "rllm: error: ")
    assert line.endswith(f"did you mean {suggestion!r}?"), line
    assert overrides[-1].split("=")[0].split(".")[0] in line  # the line names the key to change
    assert not any(nothing_loads.iterdir())


def test_the_role_of_a_mapped_estimator_is_named(
    capsys: pytest.CaptureFixture[str], nothing_loads: Path
) -> None:
    assert (
        main(["train", "algorithm.advantage={default: grpo, solver: rlo}", f"model.path={MISSING_MODEL}"])
        == 2
    )
    assert _one_line(capsys, "rllm: error: ") == (
        "rllm: error: config key 'algorithm.advantage': unknown advantage estimator 'rlo' for role 'solver' "
        "— did you mean 'rloo'?"
    )


def test_a_name_with_no_close_match_lists_the_choices(
    capsys: pytest.CaptureFixture[str], nothing_loads: Path
) -> None:
    from rllm.algorithms.advantages import ADVANTAGE_ESTIMATORS

    assert main(["train", "algorithm.advantage=ppo", f"model.path={MISSING_MODEL}"]) == 2
    assert _one_line(capsys, "rllm: error: ").endswith(
        f"unknown advantage estimator 'ppo': choose one of {', '.join(sorted(ADVANTAGE_ESTIMATORS))}"
    )


def test_every_registered_estimator_is_accepted() -> None:
    from rllm.algorithms.advantages import ADVANTAGE_ESTIMATORS

    for name in ADVANTAGE_ESTIMATORS:
        assert TrainConfig(algorithm={"advantage": name}).algorithm.advantage == name
    assert TrainConfig(algorithm={"advantage": {"default": "rloo", "judge": "reinforce"}})


def test_agent_trainer_config_refuses_an_unknown_estimator_at_construction() -> None:
    with pytest.raises(ValidationError, match="unknown advantage estimator 'grop' — did you mean 'grpo'"):
        TrainConfig(algorithm={"advantage": "grop"})


def test_agent_trainer_refuses_an_unknown_dataset_or_reward_first(nothing_loads: Path) -> None:
    from rllm.trainer.backends.base import UnsupportedConfigError

    for data, suggestion in (({"task": "multipli"}, "multiply"), ({"reward": "exact_mach"}, "exact_match")):
        cfg = TrainConfig(model={"path": MISSING_MODEL}, data=data, trainer={"run_dir": str(nothing_loads)})
        with pytest.raises(UnsupportedConfigError, match=f"did you mean {suggestion!r}\\?$"):
            agent_trainer.AgentTrainer(cfg)


def test_a_registered_datasets_reward_must_be_registered_in_this_process(
    capsys: pytest.CaptureFixture[str], nothing_loads: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dataset registered with a user's reward, trained or evaluated by a process that never registered
    that reward: refused at start-up, not with a KeyError traceback at the first episode."""
    rewards.register_reward("mine", lambda task, response: 1.0)
    rows = [{"task_id": f"t{i}", "question": f"{i}?", "ground_truth": str(i)} for i in range(3)]
    DatasetRegistry().register("mydata", rows, "train", reward="mine")
    DatasetRegistry().register("mydata", rows, "test", reward="mine")
    rewards.unregister_reward("mine")  # as in a new process, which has not registered it

    assert main(["train", "data.task=mydata", f"model.path={MISSING_MODEL}"]) == 2
    assert "dataset 'mydata' is scored by reward 'mine', which is not registered" in _one_line(
        capsys, "rllm: error: "
    )
    assert main(["eval", "mydata", "--model", MISSING_MODEL, "--output", str(tmp_path / "e.jsonl")]) == 2
    assert "reward 'mine', which is not registered: pass --reward NAME" in _one_line(capsys, "rllm eval: ")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["larjer"], "rllm eval: unknown dataset 'larjer' — did you mean 'larger'?"),
        (
            ["larger", "--split", "tset"],
            "rllm eval: dataset 'larger' has no split 'tset' — did you mean 'test'?",
        ),
        (["larger", "--reward", "mathh"], "rllm eval: unknown reward 'mathh' — did you mean 'math'?"),
        (["countdwn"], "rllm eval: unknown dataset 'countdwn' — did you mean 'countdown'?"),
    ],
)
def test_rllm_eval_refuses_an_unknown_name_before_anything_loads(
    capsys: pytest.CaptureFixture[str], nothing_loads: Path, tmp_path: Path, args: list[str], expected: str
) -> None:
    output = tmp_path / "evals" / "out.jsonl"
    assert main(["eval", *args, "--model", MISSING_MODEL, "--output", str(output)]) == 2
    assert _one_line(capsys, "rllm eval: ").startswith(expected)
    assert not output.parent.exists()


def test_every_dataset_names_a_registered_reward() -> None:
    """The built-in datasets and the catalog's benchmarks name rewards that exist (None: scored otherwise)."""
    named = {d.name: d.reward for d in builtin_datasets().values()} | {
        e.name: e.reward for e in CATALOG.values()
    }
    unknown = {
        name: reward for name, reward in named.items() if reward not in (None, *rewards.reward_names())
    }
    assert not unknown


def test_get_reward_says_which_exist() -> None:
    with pytest.raises(rewards.UnknownRewardError) as info:
        rewards.get_reward("countdwn")
    assert str(info.value) == "unknown reward 'countdwn' — did you mean 'countdown'?"
    assert isinstance(info.value, KeyError)  # callers that catch KeyError still do


def test_console_refusal_of_an_unknown_estimator_is_one_line() -> None:
    """The command as a user runs it: exit 2 and one line on stderr, long before a model could load."""
    proc = subprocess.run(
        [sys.executable, "-m", "rllm", "train", "algorithm.advantage=grop", f"model.path={MISSING_MODEL}"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        "rllm: error: config key 'algorithm.advantage': unknown advantage estimator 'grop' — did you mean 'grpo'?"
    ]


def test_a_misspelt_builtin_model_is_refused_not_fetched_from_the_hub(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from rllm.models import ModelNotFoundError, resolve_model

    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):  # offline, a hub id must be cached: not this test
        monkeypatch.delenv(var, raising=False)

    with pytest.raises(
        ModelNotFoundError, match="unknown built-in model 'smollm2-13m' — did you mean 'smollm2-135m'"
    ):
        resolve_model("smollm2-13m")
    assert resolve_model("gpt2") == "gpt2"  # a hub id without an owner is still a hub id
    assert resolve_model("HuggingFaceTB/smollm2-13m") == "HuggingFaceTB/smollm2-13m"


def test_rllm_dataset_pull_suggests_the_catalog_entry(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dataset", "pull", "gsm8kk"]) == 1
    assert capsys.readouterr().err.strip() == "error: 'gsm8kk' is not in the catalog — did you mean 'gsm8k'?"
