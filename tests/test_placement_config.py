"""Start-up refusals of the distributed backend and the vLLM pool, and the loop's on-policy guard.

Each refusal is one line with exit code 2, before any model loads (``no_training`` fails the test
otherwise). The staleness guard is shown on a real tiny run whose engine silently drops a weight sync.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from rllm.cli.main import main
from rllm.trainer import agent_trainer
from rllm.trainer.agent_trainer import AgentTrainer, StaleSamplesError, TrainResult, check_staleness
from rllm.trainer.backends import BACKENDS, backend_capabilities, backend_class, build_backend
from rllm.trainer.backends.base import TrainingBackend
from rllm.trainer.config import TrainConfig
from rllm.types import Episode, Step, Trajectory
from rllm.utils.config import load_config


@pytest.fixture
def no_training(monkeypatch: pytest.MonkeyPatch) -> None:
    def train(self: AgentTrainer) -> TrainResult:
        raise AssertionError("the config should have been refused at start-up")

    monkeypatch.setattr(agent_trainer.AgentTrainer, "train", train)


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rllm: error: "), err
    return err[0]


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            ["backend.distributed.world_size=4"],
            "backend.name=local has no such option, it belongs to backend.name=distributed",
        ),
        (
            ["inference.vllm.num_servers=2"],
            "inference.engine=local has no such option, it belongs to inference.engine=vllm",
        ),
        (
            ["backend.name=distributed", "backend.device=cpu", "backend.distributed.comm=nccl"],
            "backend.distributed.comm=nccl needs GPUs",
        ),
        (
            ["inference.engine=vllm", "inference.vllm.python=/nonexistent/bin/python"],
            "/nonexistent/bin/python, which does not exist: run scripts/setup_vllm.sh",
        ),
        (
            [
                "inference.engine=vllm",
                "inference.vllm.urls=[http://127.0.0.1:9]",
                "inference.vllm.num_servers=2",
            ],
            "inference.vllm.num_servers (settings of started servers) would do nothing",
        ),
        (
            ["inference.engine=vllm", "inference.vllm.urls=[http://127.0.0.1:9]", "inference.dtype=float32"],
            "inference.dtype and inference.max_batch_rows apply to the local engine",
        ),
        (
            ["inference.engine=vllm", "inference.vllm.urls=[http://127.0.0.1:9]", "rollout.top_p=0.9"],
            "rollout.top_p=0.9 / rollout.top_k=0 with inference.engine=vllm: its logprobs after top-p/top-k",
        ),
        (
            ["inference.engine=vllm", "inference.vllm.python=/bin/sh", "rollout.top_k=20"],
            "set rollout.top_p=1.0 and rollout.top_k=0, or use inference.engine=local",
        ),
        (
            [
                "inference.engine=vllm",
                "inference.vllm.python=/bin/sh",
                "lora.rank=32",
                "inference.vllm.max_lora_rank=16",
            ],
            "lora.rank=32 is above inference.vllm.max_lora_rank=16",
        ),
        (
            [
                "inference.engine=vllm",
                "inference.vllm.python=/bin/sh",
                "lora.enabled=false",
                "optim.lr=1e-5",
                "inference.vllm.max_lora_rank=16",
            ],
            "inference.vllm.max_lora_rank applies to LoRA runs",
        ),
        (
            [
                "inference.engine=vllm",
                "inference.vllm.python=/bin/sh",
                "inference.vllm.num_servers=2",
                "inference.vllm.servers=[{tensor_parallel_size: 1}]",
            ],
            "inference.vllm.servers has 1 entries for num_servers=2",
        ),
    ],
)
def test_placement_refusals_are_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], no_training: None, tmp_path: Path, overrides: list[str], expected: str
) -> None:
    assert main(["train", f"trainer.run_dir={tmp_path}", *overrides]) == 2
    assert expected in _one_line(capsys)
    assert not any(tmp_path.iterdir()), "nothing is written for a refused config"


def test_distributed_without_ray_says_how_to_install_it(
    capsys: pytest.CaptureFixture[str], no_training: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    real = importlib.util.find_spec
    # Ray is installed here; this makes it look absent (a fake of a machine without the extra).
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a)
    )
    assert main(["train", f"trainer.run_dir={tmp_path}", "backend.name=distributed"]) == 2
    assert "pip install 'rllm[distributed]'" in _one_line(capsys)


def test_every_backend_implements_the_whole_api_and_declares_capabilities() -> None:
    for name in BACKENDS:
        cls = backend_class(name)  # importing a backend's module imports no heavy dependency (Ray)
        assert issubclass(cls, TrainingBackend) and not cls.__abstractmethods__, name
        assert backend_capabilities(name).name == name


def test_the_loop_names_no_concrete_backend_or_engine() -> None:
    source = Path(agent_trainer.__file__).read_text()
    for concrete in ("LocalBackend", "LocalEngine", "DistributedBackend", "VLLMPoolEngine"):
        assert concrete not in source, concrete


def _episode(versions: list[int], failed: bool = False) -> Episode:
    steps = [Step(prompt_ids=[1], response_ids=[2], logprobs=[-0.1], weight_version=v) for v in versions]
    ep = Episode(task_id="t", trajectories=[Trajectory(name="solver", steps=steps)])
    if failed:
        ep.termination_reason = "error"
    return ep


def test_staleness_guard_refuses_samples_older_than_allowed() -> None:
    check_staleness([_episode([3, 3])], version=3, max_staleness=0)
    check_staleness([_episode([2, 3])], version=3, max_staleness=1)
    with pytest.raises(
        StaleSamplesError, match=r"1 sample\(s\) .* weight version 2, but the policy is at version 3"
    ):
        check_staleness([_episode([3]), _episode([2])], version=3, max_staleness=0)


def test_a_dropped_weight_sync_stops_training_instead_of_learning_off_policy(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    cfg = load_config(
        TrainConfig,
        None,
        [
            f"model.path={tiny_model_dir}",
            f"trainer.run_dir={tmp_path}",
            "trainer.steps=3",
            "rollout.batch_size=2",
            "rollout.group_size=2",
            "rollout.max_tokens=4",
            "eval.before=false",
            "eval.after=false",
            "eval.every_steps=0",
            "data.train_size=8",
            "data.test_size=2",
            "trainer.plot=false",
            "backend.device=cpu",
            "algorithm.filters.drop_zero_variance=false",
            "trainer.store_enabled=false",
        ],
    )
    trainer = AgentTrainer(cfg)
    real_setup = trainer._setup

    def setup_with_a_broken_engine() -> None:
        real_setup()
        # A FAKE fault: the engine acknowledges the sync but keeps sampling from the old weights (version 0).
        trainer.engine.load_weights = lambda named, version=None: None

    trainer._setup = setup_with_a_broken_engine
    with pytest.raises(StaleSamplesError, match="weight version 0, but the policy is at version 1"):
        trainer.train()


def test_build_backend_builds_the_configured_backend(tiny_model_dir: Path) -> None:
    cfg = TrainConfig(backend={"device": "cpu"})
    backend = build_backend(cfg, str(tiny_model_dir), pad_id=2)
    assert type(backend).__name__ == "LocalBackend" and backend.step == 0
    assert any(isinstance(t, torch.Tensor) for _, t in backend.named_merged_weights())


def test_the_cluster_example_config_is_valid() -> None:
    cfg = load_config(
        TrainConfig, Path(__file__).parents[1] / "examples/configs/cluster_qwen1.5b_gsm8k.yaml", []
    )
    assert cfg.backend.name == "distributed" and cfg.inference.engine == "vllm"
    assert len(cfg.inference.vllm.servers) == cfg.inference.vllm.num_servers
