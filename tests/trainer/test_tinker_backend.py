"""``backend.name=tinker``: rllm's trainer on the real ``tinker`` SDK, against the real ``rllm serve tinker`` on
loopback (in a thread of this process). The run learns; its loss is rllm's loss (the aggregation becomes
per-token advantage weights, which the service sums); async training keeps its staleness bound; a checkpoint
resumes; and what Tinker cannot do is refused at start-up in one line."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_learning import TASKS, answer_workflow, make_tiny_vocab_model

from rllm.trainer.agent_trainer import AgentTrainer
from rllm.trainer.backends import build_backend
from rllm.trainer.backends.base import UnsupportedConfigError
from rllm.trainer.config import TrainConfig
from rllm.types import TrainBatch, TrainSequence
from rllm.utils.config import load_config

pytest.importorskip("tinker", reason="the tinker extra (in rllm[test]) is not installed")

from rllm.serve.tinker.server import ServeConfig, ServerThread, build_service


@pytest.fixture(scope="module")
def vocab_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_vocab_model(tmp_path_factory.mktemp("model"))


@pytest.fixture(scope="module")
def service_url(vocab_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    state = tmp_path_factory.mktemp("tinker_state")
    service = build_service(ServeConfig(model=str(vocab_model), dtype="float32", state_dir=str(state)))
    with ServerThread(service, port=0) as server:
        yield server.base_url


def _config(model: Path, url: str, run_dir: Path, steps: int, *extra: str) -> TrainConfig:
    return load_config(
        TrainConfig,
        None,
        [
            f"model.path={model}",
            "backend.name=tinker",
            f"backend.tinker.base_url={url}",
            "lora.rank=8",
            "optim.lr=0.01",
            f"trainer.steps={steps}",
            "trainer.threads=1",
            "rollout.batch_size=4",
            "rollout.group_size=16",
            "rollout.max_tokens=1",
            "eval.every_steps=0",
            "eval.max_tokens=1",
            f"trainer.run_dir={run_dir}",
            "trainer.loggers=[jsonl]",
            "trainer.plot=false",
            *extra,
        ],
    )


def _rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_a_tinker_run_learns_through_the_service(vocab_model: Path, service_url: str, tmp_path: Path) -> None:
    steps = 20
    cfg = _config(vocab_model, service_url, tmp_path / "runs", steps)
    assert cfg.inference.engine == "tinker"  # the backend's own sampler, unless the config says otherwise
    result = AgentTrainer(cfg, workflow=answer_workflow, train_tasks=TASKS, test_tasks=TASKS).train()
    rewards = [r["reward/mean"] for r in _rows(result.run_dir) if "reward/mean" in r]
    print("\ntinker backend: " + " ".join(f"{r:.2f}" for r in rewards))
    assert len(rewards) == steps and rewards[0] < 0.25
    assert sum(rewards[-3:]) / 3 >= 0.8 and (result.final_accuracy or 0) >= 0.75
    record = json.loads((result.final_model_dir / "tinker.json").read_text())
    assert record["sampler_path"].startswith("tinker://") and record["step"] == steps


def _batch() -> TrainBatch:
    """Answers of different lengths with different advantages: each aggregation weighs their tokens
    differently. Behaviour logprobs a little off the model's, so ratios and clipping are not trivial."""

    def row(prompt: list[int], answer: list[int], advantage: float, group: str) -> TrainSequence:
        n = len(answer)
        return TrainSequence(
            input_ids=prompt + answer,
            loss_mask=[0] * len(prompt) + [1] * n,
            rollout_logprobs=[0.0] * len(prompt) + [-2.8 + 0.1 * i for i in range(n)],
            advantages=[0.0] * len(prompt) + [advantage] * n,
            group_id=group,
        )

    return TrainBatch(
        sequences=[
            row([1, 2], [5, 6, 7], 1.0, "a"),
            row([1, 2], [8], -1.0, "a"),
            row([3], [9, 10, 11, 12], 0.5, "b"),
            row([3], [6], -0.5, "b"),
        ]
    )


@pytest.mark.parametrize(
    "agg", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
)
def test_the_loss_through_the_service_is_rllms_loss(
    vocab_model: Path, service_url: str, tmp_path: Path, agg: str
) -> None:
    """At step 0 (the adapter starts at zero: both models are the base model) the service's summed loss with
    rllm's weights equals the local backend's aggregated loss, for every aggregation."""
    extra = ["algorithm.loss.name=ppo", f"algorithm.loss.agg={agg}"]
    if agg == "seq-mean-token-sum-norm":
        extra.append("algorithm.loss.agg_norm_tokens=8")
    tinker_cfg = _config(vocab_model, service_url, tmp_path, 1, *extra)
    local_cfg = load_config(
        TrainConfig,
        None,
        [f"model.path={vocab_model}", "backend.device=cpu", "backend.autocast=none", *extra],
    )
    batch = _batch()
    losses = {}
    for name, cfg in (("tinker", tinker_cfg), ("local", local_cfg)):
        backend = build_backend(cfg, str(vocab_model), pad_id=0)
        try:
            losses[name] = backend.forward_backward(batch, cfg.algorithm.loss)
        finally:
            backend.close()
    assert losses["tinker"]["train/loss"] == pytest.approx(losses["local"]["train/loss"], rel=1e-4, abs=1e-6)
    for key in ("train/ratio_mean", "train/approx_kl", "train/clip_fraction"):
        assert losses["tinker"][key] == pytest.approx(losses["local"][key], rel=1e-3, abs=1e-5), key


def test_async_training_through_the_service_keeps_its_bound(
    vocab_model: Path, service_url: str, tmp_path: Path
) -> None:
    cfg = _config(vocab_model, service_url, tmp_path / "runs", 4, "rollout.max_staleness=1")
    AgentTrainer(cfg, workflow=answer_workflow, train_tasks=TASKS, test_tasks=TASKS[:2]).train()
    rows = [r for r in _rows(tmp_path / "runs" / "default") if "reward/mean" in r]
    assert len(rows) == 4 and all(r["rollout/staleness_max"] <= 1 for r in rows)
    assert any(r["rollout/staleness_max"] == 1 for r in rows)  # the sampler ran ahead of the trainer


def test_a_checkpoint_in_the_service_resumes(vocab_model: Path, service_url: str, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    first = _config(vocab_model, service_url, runs, 2, "trainer.checkpoint_every=2")
    AgentTrainer(first, workflow=answer_workflow, train_tasks=TASKS, test_tasks=TASKS[:2]).train()
    state = json.loads(next((runs / "default" / "checkpoints").glob("step_*/tinker_state.json")).read_text())
    assert state["step"] == 2 and state["state_path"].startswith("tinker://")
    resumed = _config(vocab_model, service_url, runs, 4, "trainer.resume=true")
    AgentTrainer(resumed, workflow=answer_workflow, train_tasks=TASKS, test_tasks=TASKS[:2]).train()
    assert [r["step"] for r in _rows(runs / "default") if "reward/mean" in r] == [1, 2, 3, 4]


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["lora.alpha=16"], "the service fixes alpha, dropout and the adapted layers): drop lora.alpha"),
        (["lora.enabled=false"], "backend 'tinker' trains LoRA only"),
        (["algorithm.loss.name=gspo"], "backend 'tinker' has no loss 'gspo'"),
        (["algorithm.loss.kl_coef=0.1"], "backend 'tinker' has no KL to a reference"),
        (
            ["backend.old_logprobs=recompute", "algorithm.loss.tis_cap=2"],
            "Tinker's losses take no per-token truncated-IS weight",
        ),
        (["backend.micro_batch_size=4"], "backend.name=tinker does not read backend.micro_batch_size"),
        (["inference.dtype=float32"], "inference.dtype apply to the local engine"),
        (["rollout.top_p=0.9"], "with inference.engine=tinker: its logprobs after top-p/top-k"),
        (
            ["inference.engine=local"],
            "hands weights over as service, and inference.engine=local takes tensors",
        ),
    ],
)
def test_what_tinker_cannot_do_is_refused_at_start_up(
    vocab_model: Path, tmp_path: Path, extra: list[str], expected: str
) -> None:
    cfg = _config(vocab_model, "http://127.0.0.1:9", tmp_path, 1, *extra)
    with pytest.raises(UnsupportedConfigError, match=re.escape(expected)):
        AgentTrainer(cfg, workflow=answer_workflow, train_tasks=TASKS, test_tasks=TASKS)


def test_no_service_to_talk_to_is_refused(
    vocab_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TINKER_BASE_URL", raising=False)
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    cfg = load_config(TrainConfig, None, [f"model.path={vocab_model}", "backend.name=tinker"])
    with pytest.raises(UnsupportedConfigError, match="no service to talk to: set backend.tinker.base_url"):
        AgentTrainer(cfg, workflow=answer_workflow, train_tasks=TASKS, test_tasks=TASKS)
