"""Every kind of plug-in is one file: each below is defined and registered in this test file only, then named
in config and used by rllm's own code with no other change (the environment's twin is
``tests/envs/test_plugin_env.py``). An unknown name is refused with a did-you-mean that names the config key,
and an installed package's entry point in a kind's group is loaded the first time a name is looked up."""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from pydantic import Field

from rllm.algorithms.advantages import ADVANTAGE_ESTIMATORS, EstimatorCapabilities
from rllm.algorithms.losses import POLICY_LOSSES, compute_policy_loss
from rllm.algorithms.prepare import estimator_options
from rllm.algorithms.transforms import compute_advantages, group_episodes
from rllm.data.plugins import DATASETS, register_dataset
from rllm.data.registry import DatasetRegistry
from rllm.rewards.instructions import answer_instruction
from rllm.rewards.registry import REWARDS, register_reward, unregister_reward
from rllm.tools.named import TOOLS
from rllm.trainer.agent_trainer import AgentTrainer
from rllm.trainer.backends.base import BackendCapabilities, UnsupportedConfigError
from rllm.trainer.checks import check_config
from rllm.trainer.config import WORKFLOWS, TrainConfig, WorkflowConfig
from rllm.types import Episode, Outcome, Step, Trajectory
from rllm.utils.config import ConfigError, load_config
from rllm.utils.metrics import SINKS, SinkContext, SinkRequirements
from rllm.utils.registry import Registry, UnknownPluginError
from rllm.workflows.single_turn import SingleTurnWorkflow

# --------------------------------------------------------------------- the plug-ins: this file only

ESTIMATED: list[int] = []  # the group count of each call of the estimator below
LOGGED: dict[int, dict[str, float]] = {}  # what the sink below received, by step
BUILT: list[str] = []  # the preamble each workflow below was built with


def centred(rewards_by_group: list[np.ndarray]) -> list[np.ndarray]:
    """A_i = r_i - mean_G(r), recorded."""
    ESTIMATED.append(len(rewards_by_group))
    return [np.asarray(r, dtype=float) - np.mean(r) for r in rewards_by_group]


def half_reinforce(logprobs_BT, old_logprobs_BT, advantages_BT, mask_BT, cfg):
    """L_t = -clip(r_t, 1 - clip_low, 1 + clip_high) * A_t / 2: reads ppo's clip knobs."""
    ratio_BT = torch.exp(logprobs_BT - old_logprobs_BT)
    clipped_BT = ratio_BT.clamp(1 - cfg.clip_low, 1 + cfg.clip_high)
    return -0.5 * clipped_BT * advantages_BT, ratio_BT, clipped_BT != ratio_BT


def parity_reward(task: dict[str, Any], response: str) -> Outcome:
    right = task["ground_truth"] in response.lower()
    return Outcome(reward=float(right), is_correct=right)


def parity_tasks(split: str, n: int, seed: int) -> list[dict[str, Any]]:
    numbers = [seed * 1000 + i * 2 + (split == "test") for i in range(n)]
    return [
        {
            "task_id": f"parity-{split}-{k}",
            "question": f"Is {k} even or odd?",
            "ground_truth": "even" if k % 2 == 0 else "odd",
            "data_source": "tests/parity",
            "metadata": {},
        }
        for k in numbers
    ]


class PreambleOptions(WorkflowConfig):
    preamble: str = Field("", description="a system prompt before each question.")


def build_preambled(cfg: TrainConfig, scoring: dict[str, Any]) -> SingleTurnWorkflow:
    BUILT.append(cfg.workflow.preamble)
    return SingleTurnWorkflow(system_prompt=cfg.workflow.preamble, **scoring)


class MemorySink:
    def __init__(self, run: SinkContext) -> None:
        self.run = run

    def log(self, step: int, metrics: dict[str, float]) -> None:
        LOGGED[step] = dict(metrics)

    def close(self) -> None:
        pass


@pytest.fixture
def plugins() -> Iterator[None]:
    ADVANTAGE_ESTIMATORS.register("centred", centred, capabilities=EstimatorCapabilities(group_relative=True))
    POLICY_LOSSES.register("half_reinforce", half_reinforce, knobs=("clip_low", "clip_high"))
    register_reward("parity", parity_reward, instruction="Answer even or odd.")
    register_dataset("parity", parity_tasks, reward="parity", description="is n even? (generated)")
    WORKFLOWS.register("preambled", build_preambled, options=PreambleOptions)
    SINKS.register("memory", MemorySink)
    ESTIMATED.clear(), LOGGED.clear(), BUILT.clear()
    yield
    for registry, name in (
        (ADVANTAGE_ESTIMATORS, "centred"),
        (POLICY_LOSSES, "half_reinforce"),
        (DATASETS, "parity"),
        (WORKFLOWS, "preambled"),
        (SINKS, "memory"),
    ):
        registry.unregister(name)
    unregister_reward("parity")


# ----------------------------------------------------------------------------------------------- tests


def test_a_run_names_its_dataset_reward_workflow_estimator_and_logger(
    plugins: None, tiny_model_dir: Path, tmp_path: Path
) -> None:
    cfg = load_config(
        TrainConfig,
        None,
        [
            "data.task=parity",  # the dataset names its reward, parity, and that reward its instruction
            "workflow.name=preambled",
            "workflow.preamble=Be brief.",
            "algorithm.advantage=centred",
            "algorithm.filters.drop_zero_variance=false",  # every group reaches the estimator
            "trainer.loggers=[memory, jsonl]",
            f"model.path={tiny_model_dir}",
            "backend.device=cpu",
            "backend.autocast=none",
            "inference.dtype=float32",
            "trainer.steps=1",
            "trainer.threads=1",
            "rollout.batch_size=2",
            "rollout.group_size=2",
            "rollout.max_tokens=4",
            "data.train_size=4",
            "data.test_size=2",
            "eval.before=false",
            "eval.every_steps=0",
            "eval.max_tokens=4",
            f"trainer.run_dir={tmp_path}",
            "trainer.plot=false",
        ],
    )
    trainer = AgentTrainer(cfg)
    assert BUILT == ["Be brief."] and trainer.workflow.instruction == "Answer even or odd."
    assert (
        trainer.train_tasks[0]["question"].startswith("Is ")
        and DatasetRegistry().info("parity").reward == "parity"
    )
    result = trainer.train()
    assert ESTIMATED and 1 in LOGGED and "reward/mean" in LOGGED[1]
    jsonl = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert LOGGED[1]["reward/mean"] == next(r["reward/mean"] for r in jsonl if r["step"] == 1)


def test_a_registered_loss_is_named_in_config_and_computed(plugins: None) -> None:
    loss_cfg = load_config(
        TrainConfig, None, ["algorithm.loss.name=half_reinforce", "algorithm.loss.clip_high=0.5"]
    ).algorithm.loss
    logprobs = torch.log(torch.tensor([[2.0, 1.0]], dtype=torch.float64))
    old = torch.zeros(1, 2, dtype=torch.float64)
    loss, metrics = compute_policy_loss(
        logprobs, old, torch.ones(1, 2, dtype=torch.float64), torch.ones(1, 2), loss_cfg
    )
    torch.testing.assert_close(loss, torch.tensor([[-0.75, -0.5]], dtype=torch.float64))  # clip(2) = 1.5
    assert metrics["clip_fraction"].item() == pytest.approx(0.5)
    with pytest.raises(
        ConfigError, match="LossConfig.gspo_clip_low is read by the 'gspo' loss only, not 'half_"
    ):
        load_config(
            TrainConfig, None, ["algorithm.loss.name=half_reinforce", "algorithm.loss.gspo_clip_low=0.1"]
        )
    with pytest.raises(
        ConfigError, match=r"clip_high is read by the 'ppo' or 'half_reinforce' loss only, not 'is'"
    ):
        load_config(TrainConfig, None, ["algorithm.loss.name=is", "algorithm.loss.clip_high=0.5"])


def _any_loss_backend() -> BackendCapabilities:
    """A backend that runs every registered loss."""
    return BackendCapabilities(
        name="test",
        full_finetune=True,
        lora=True,
        losses=frozenset(POLICY_LOSSES),
        kl_to_reference=True,
        recompute_old_logprobs=True,
        bf16_autocast=False,
        devices=frozenset({"cpu"}),
    )


def test_what_an_estimator_declares_is_what_the_checks_ask(plugins: None) -> None:
    cfg = TrainConfig(algorithm={"advantage": "centred"}, rollout={"group_size": 1})
    with pytest.raises(UnsupportedConfigError, match="centred compares episodes within a group"):
        check_config(cfg, _any_loss_backend())
    step = Step(prompt_ids=[1], response_ids=[2], logprobs=[-0.1])
    groups = group_episodes(
        [
            Episode(task_id="t", reward=r, trajectories=[Trajectory(steps=[step.model_copy()])])
            for r in (1.0, 0.0)
        ]
    )
    compute_advantages(groups, cfg.algorithm.advantage, **estimator_options(cfg.algorithm))
    assert [t.steps[0].advantage for _, t in groups[0].members] == [0.5, -0.5] and ESTIMATED == [1]
    assert answer_instruction("parity") == "Answer even or odd."


def test_a_sink_declares_the_package_it_needs(plugins: None) -> None:
    SINKS.register("needy", MemorySink, capabilities=SinkRequirements("no_such_module_x", "pip install x"))
    try:
        with pytest.raises(
            UnsupportedConfigError,
            match=r"trainer.loggers names needy but it is not installed: pip install x",
        ):
            check_config(TrainConfig(trainer={"loggers": ["needy"]}), _any_loss_backend())
    finally:
        SINKS.unregister("needy")


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "algorithm.advantage=centerd",
            "config key 'algorithm.advantage': unknown advantage estimator 'centerd' — did you mean 'centred'?",
        ),
        (
            "algorithm.loss.name=half_reinforse",
            "config key 'algorithm.loss.name': unknown policy loss 'half_reinforse' — did you mean 'half_reinforce'?",
        ),
        (
            "trainer.loggers=[memroy]",
            "config key 'trainer.loggers': unknown metrics sink 'memroy' — did you mean 'memory'?",
        ),
        (
            "workflow.name=preambeld",
            "config key 'workflow.name': unknown workflow 'preambeld' — did you mean 'preambled'?",
        ),
        ("workflow.tools=[calculater]", "unknown tool 'calculater' — did you mean 'calculator'?"),
    ],
)
def test_an_unknown_name_is_refused_with_did_you_mean_naming_the_key(
    plugins: None, override: str, message: str
) -> None:
    overrides = ["workflow.name=tool_agent", override] if "tools" in override else [override]
    with pytest.raises(ConfigError) as caught:
        load_config(TrainConfig, None, overrides)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_lookup_names_the_config_key(plugins: None) -> None:
    with pytest.raises(
        UnknownPluginError,
        match=r"unknown dataset 'parrity' — did you mean 'parity'\? \(data.task='parrity'\)",
    ):
        DATASETS.get("parrity")
    with pytest.raises(
        KeyError, match=r"unknown tool 'pyhton' — did you mean 'python'\? \(workflow.tools='pyhton'\)"
    ):
        TOOLS.get("pyhton")


# ------------------------------------------------------------------------------------------ entry points

PLUGGED = """
import numpy as np
from rllm.algorithms.losses import POLICY_LOSSES, is_loss
from rllm.data.plugins import BuiltinDataset
from rllm.tools import tool
from rllm.trainer.config import WORKFLOWS
from rllm.workflows.single_turn import SingleTurnWorkflow

def estimator(rewards_by_group):
    return [np.zeros(len(r)) for r in rewards_by_group]

def register_losses():
    POLICY_LOSSES.register("ep_loss", is_loss)

def ep_reward(task, response):
    return 1.0

@tool
def ep_echo(text: str) -> str:
    '''Say it back.

    Args:
        text: what to say.
    '''
    return text

def tool_factory(timeout_s):
    return ep_echo

class Sink:
    def __init__(self, run): ...
    def log(self, step, metrics): ...
    def close(self): ...

DATASET = BuiltinDataset("ep_dataset", "number", "from an entry point", lambda split, n, seed: [])

WORKFLOWS.register("ep_workflow", lambda cfg, scoring: SingleTurnWorkflow(**scoring))
"""

ENTRY_POINTS = """
[rllm.advantage_estimators]
ep_estimator = plugged_kinds:estimator
[rllm.policy_losses]
losses = plugged_kinds:register_losses
[rllm.rewards]
ep_reward = plugged_kinds:ep_reward
[rllm.tools]
ep_echo = plugged_kinds:tool_factory
[rllm.loggers]
ep_sink = plugged_kinds:Sink
[rllm.datasets]
ep_dataset = plugged_kinds:DATASET
[rllm.workflows]
plugged = plugged_kinds
"""

KINDS: list[tuple[Registry[Any], str]] = [
    (ADVANTAGE_ESTIMATORS, "ep_estimator"),
    (POLICY_LOSSES, "ep_loss"),
    (REWARDS, "ep_reward"),
    (TOOLS, "ep_echo"),
    (SINKS, "ep_sink"),
    (DATASETS, "ep_dataset"),
    (WORKFLOWS, "ep_workflow"),
]


@pytest.fixture
def installed_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A package on sys.path with an entry point in the group of every kind (the three forms: a module
    that registers on import, a ``register*`` function, the plug-in itself under the entry point's name)."""
    (tmp_path / "plugged_kinds.py").write_text(textwrap.dedent(PLUGGED))
    dist = tmp_path / "plugged_kinds-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: plugged-kinds\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(ENTRY_POINTS)
    monkeypatch.syspath_prepend(str(tmp_path))
    for registry, _ in KINDS:
        monkeypatch.setattr(registry, "_entry_points_loaded", False)  # look again, with it installed
    yield
    for registry, name in KINDS:
        registry.unregister(name)
    sys.modules.pop("plugged_kinds", None)


def test_an_installed_package_plugs_into_every_kind(installed_package: None) -> None:
    assert {registry.group for registry, _ in KINDS} == {
        "rllm.advantage_estimators",
        "rllm.policy_losses",
        "rllm.rewards",
        "rllm.tools",
        "rllm.loggers",
        "rllm.datasets",
        "rllm.workflows",
    }
    cfg = load_config(
        TrainConfig,
        None,
        [
            "algorithm.advantage=ep_estimator",
            "algorithm.loss.name=ep_loss",
            "trainer.loggers=[ep_sink]",
            "workflow.name=ep_workflow",
            "data.task=ep_dataset",
            "data.reward=ep_reward",
        ],
    )
    assert cfg.workflow.name == "ep_workflow"
    for registry, name in KINDS:
        assert name in registry, registry.kind
    assert REWARDS.get("ep_reward")({}, "") == 1.0 and TOOLS.get("ep_echo")(1.0).name == "ep_echo"
    assert DatasetRegistry().info("ep_dataset").description == "from an entry point"
