"""Separate weights per role on the local backend (the tiny model): each role's rows train only its own
adapter with its own optimizer and learning rate, one adapter through ``roles`` updates exactly as no roles,
the adapters are handed to an engine as (A, B) pairs, saved and restored with their optimizers, and exported
one merged model per adapter."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM

from rllm.algorithms.losses import LossConfig
from rllm.inference.base import EngineCapabilities
from rllm.trainer.backends.base import UnsupportedConfigError
from rllm.trainer.backends.local import LocalBackend
from rllm.trainer.config import TrainConfig
from rllm.types import TrainBatch, TrainSequence
from rllm.utils.config import load_config

PAD_ID = 2
ROLES = ("roles.solver.adapter=solver", "roles.judge.adapter=judge")


def _backend(model_dir: Path, *overrides: str) -> LocalBackend:
    base = [
        f"model.path={model_dir}",
        "backend.device=cpu",
        "backend.autocast=none",
        "lora.rank=4",
        "lora.alpha=8",
        "optim.lr=0.01",
        "optim.grad_clip=null",
        "trainer.steps=10",
    ]
    cfg = load_config(TrainConfig, None, base + list(overrides))
    return LocalBackend(cfg, str(model_dir), pad_id=PAD_ID)


def _batch(roles: list[str], seed: int = 0) -> TrainBatch:
    """One row per entry of ``roles`` (its trajectory name), random tokens, +-1 advantages."""
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for i, role in enumerate(roles):
        ids = torch.randint(3, 49152, (7,), generator=gen).tolist()
        mask = [0, 0, 0, 1, 1, 1, 1]
        adv = 1.0 if i % 2 == 0 else -1.0
        rows.append(
            TrainSequence(
                input_ids=ids,
                loss_mask=mask,
                rollout_logprobs=[-10.8 * m for m in mask],
                advantages=[adv * m for m in mask],
                trajectory_name=role,
            )
        )
    return TrainBatch(sequences=rows)


def _step(backend: LocalBackend, batch: TrainBatch) -> dict[str, float]:
    metrics = backend.forward_backward(batch, LossConfig())
    return {**metrics, **backend.optim_step()}


def _adapter_params(backend: LocalBackend, name: str) -> dict[str, torch.Tensor]:
    return {
        n: p.detach().clone()
        for n, p in backend.model.named_parameters()
        if f".lora_A.{name}." in n or f".lora_B.{name}." in n
    }


def _changed(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> bool:
    return any(not torch.equal(before[k], after[k]) for k in before)


@pytest.fixture(scope="module")
def trained(tiny_model_dir: Path) -> LocalBackend:
    """Solver and judge adapters, the judge at 10x the learning rate, after one step on solver rows only."""
    backend = _backend(tiny_model_dir, *ROLES, "roles.judge.lr=0.1")
    _step(backend, _batch(["solver"] * 4))
    return backend


def test_each_role_trains_only_its_own_adapter(tiny_model_dir: Path) -> None:
    backend = _backend(tiny_model_dir, *ROLES, "roles.judge.lr=0.1")
    assert backend.adapter_names == ["default", "solver", "judge"]
    before = {n: _adapter_params(backend, n) for n in backend.adapter_names}
    metrics = _step(backend, _batch(["solver", "solver", "judge", "judge", "other", "other"]))
    after = {n: _adapter_params(backend, n) for n in backend.adapter_names}
    for name in backend.adapter_names:  # "other" is not listed: its rows train "default"
        assert _changed(before[name], after[name]), name
        assert metrics[f"adapter/{name}/grad_norm"] > 0 and metrics[f"adapter/{name}/tokens"] == 8
    assert metrics["adapter/judge/lr"] == pytest.approx(0.1) and metrics["adapter/solver/lr"] == 0.01
    assert metrics["train/loss"] == pytest.approx(
        sum(metrics[f"adapter/{n}/loss"] for n in backend.adapter_names)
    )
    # AdamW's first step moves each changed weight by about its lr: the judge's override is its own.
    for name, lr in (("solver", 0.01), ("judge", 0.1)):
        moved = max(float((after[name][k] - before[name][k]).abs().max()) for k in before[name])
        assert moved == pytest.approx(lr, rel=0.01), name

    # A step with solver rows only leaves the judge and the default adapter exactly as they were.
    _step(backend, _batch(["solver"] * 3, seed=1))
    again = {n: _adapter_params(backend, n) for n in backend.adapter_names}
    assert _changed(after["solver"], again["solver"])
    assert not _changed(after["judge"], again["judge"]) and not _changed(after["default"], again["default"])


def test_one_adapter_through_roles_updates_exactly_as_no_roles(tiny_model_dir: Path) -> None:
    # Global loss normalisation: every adapter's rows are divided by the whole batch's counts, so roles that
    # all name one adapter train it exactly as a run without roles would.
    plain = _backend(tiny_model_dir)
    one = _backend(tiny_model_dir, "roles.solver.adapter=default", "roles.judge.adapter=default")
    batch = _batch(["solver", "judge", "solver", "judge"])
    m_plain, m_one = _step(plain, batch), _step(one, batch)
    assert m_one["train/loss"] == pytest.approx(m_plain["train/loss"], abs=1e-6)
    assert m_one["train/grad_norm"] == pytest.approx(m_plain["train/grad_norm"], rel=1e-5)
    a, b = _adapter_params(plain, "default"), _adapter_params(one, "default")
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=1e-7)


def test_logprobs_use_each_rows_adapter(trained: LocalBackend) -> None:
    batch = _batch(["solver", "judge"], seed=3)
    both = trained.compute_logprobs(batch)
    # The same two rows all under the judge's adapter: the judge row agrees, the solver row does not.
    as_judge = trained.compute_logprobs(
        TrainBatch(sequences=[s.model_copy(update={"trajectory_name": "judge"}) for s in batch.sequences])
    )
    assert both[1] == pytest.approx(as_judge[1], abs=1e-6)
    assert max(abs(x - y) for x, y in zip(both[0], as_judge[0])) > 1e-4


def test_adapter_tensors_are_the_deltas_and_only_the_changed_after_a_sync(trained: LocalBackend) -> None:
    trained.named_adapter_tensors()  # a sync window starts
    _step(trained, _batch(["judge"] * 2, seed=2))
    changed = trained.named_adapter_tensors(changed_only=True)
    assert set(changed) == {"judge"}
    everything = trained.named_adapter_tensors()
    assert set(everything) == {"default", "solver", "judge"}
    tensors = everything["solver"]
    assert "model.layers.0.self_attn.q_proj" in tensors
    deltas = dict(trained.roles.iter_deltas("solver"))  # what peft itself adds to each weight
    assert set(deltas) == {f"{m}.weight" for m in tensors}
    for module, (a, b) in tensors.items():
        assert a.shape[0] == b.shape[1] == 4  # [r, in], [out, r]
        torch.testing.assert_close(trained.adapter_scaling * b @ a, deltas[f"{module}.weight"])


class LoadAdaptersRecorder:
    """Records what ``sync_weights_to`` hands an engine that serves adapters (no sampling: a recorder)."""

    capabilities = EngineCapabilities(name="recorder", weight_transfer="tensors", adapters=True)

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], float, int]] = []

    def load_adapters(self, adapters: dict, *, scaling: float, version: int) -> None:
        self.calls.append((sorted(adapters), scaling, version))


def test_sync_hands_every_adapter_then_the_changed_ones(tiny_model_dir: Path) -> None:
    backend = _backend(tiny_model_dir, *ROLES)
    engine = LoadAdaptersRecorder()
    backend.sync_weights_to(engine)
    _step(backend, _batch(["solver", "solver"]))
    backend.sync_weights_to(engine)
    assert engine.calls == [(["default", "judge", "solver"], 2.0, 0), (["solver"], 2.0, 1)]


def test_state_round_trip_resumes_exactly(
    trained: LocalBackend, tiny_model_dir: Path, tmp_path: Path
) -> None:
    trained.save_state(tmp_path / "ckpt")
    assert sorted(p.name for p in (tmp_path / "ckpt" / "adapters").iterdir()) == [
        "default",
        "judge",
        "solver",
    ]
    resumed = _backend(tiny_model_dir, *ROLES, "roles.judge.lr=0.1")
    resumed.load_state(tmp_path / "ckpt")
    assert resumed.step == trained.step
    batch = _batch(["solver", "judge", "other"], seed=5)
    _step(trained, batch)
    _step(resumed, batch)
    for name in trained.adapter_names:  # same weights and the same AdamW moments: the same next step
        a, b = _adapter_params(trained, name), _adapter_params(resumed, name)
        for k in a:
            torch.testing.assert_close(a[k], b[k], rtol=0, atol=0)

    with pytest.raises(UnsupportedConfigError, match="holds adapters"):
        _backend(tiny_model_dir, "roles.solver.adapter=solver").load_state(tmp_path / "ckpt")
    with pytest.raises(UnsupportedConfigError, match="has no roles"):
        _backend(tiny_model_dir).load_state(tmp_path / "ckpt")


def test_export_writes_one_merged_model_per_adapter(tiny_model_dir: Path, tmp_path: Path) -> None:
    trained = _backend(tiny_model_dir, *ROLES)
    _step(trained, _batch(["solver"] * 2))
    trained.export_model(tmp_path / "final")
    weights = {}
    for name in trained.adapter_names:
        merged = AutoModelForCausalLM.from_pretrained(tmp_path / "final" / name, dtype=torch.float32)
        base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
        plain_q = base.state_dict()["model.layers.0.self_attn.q_proj.weight"].clone()
        # The PEFT adapter beside it, merged by peft itself, is the same model.
        by_peft = PeftModel.from_pretrained(base, tmp_path / "final" / name / "adapter").merge_and_unload()
        ours, theirs = merged.state_dict(), by_peft.state_dict()
        for k, v in ours.items():
            torch.testing.assert_close(v, theirs[k], rtol=1e-5, atol=1e-6)
        weights[name] = ours["model.layers.0.self_attn.q_proj.weight"]
    # Only solver rows were trained; the others' B start at 0, so their models are the base.
    assert not torch.equal(weights["solver"], plain_q)
    assert torch.equal(weights["judge"], plain_q) and torch.equal(weights["default"], plain_q)

    trained.save_adapter(tmp_path / "judge_only", adapter="judge")
    assert (tmp_path / "judge_only" / "adapter_config.json").is_file()
    with pytest.raises(ValueError, match="no adapter 'critic'"):
        trained.save_adapter(tmp_path / "x", adapter="critic")


def _model_copy(src: Path, dest: Path, layout: str) -> Path:
    """``src``'s model stored as one safetensors file, as index-named shards, or as a legacy ``.bin``."""
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    if layout == "bin":  # what export cannot read back by name: it keeps a copy of each adapted weight
        model.config.save_pretrained(dest)
        torch.save(model.state_dict(), dest / "pytorch_model.bin")
    else:
        model.save_pretrained(dest, max_shard_size="100KB" if layout == "sharded" else "5GB")
    return dest


@pytest.mark.parametrize("layout", ["single", "sharded", "bin"])
def test_each_exported_model_is_the_base_with_only_its_own_adapter(
    tiny_model_dir: Path, tmp_path: Path, layout: str
) -> None:
    # Two trained adapters exported one after another into one model copy: each is merged on the base
    # weights (read back from the files between adapters, or from the copy kept for a .bin model), never on
    # the adapter merged before it.
    model_dir = _model_copy(tiny_model_dir, tmp_path / "model", layout)
    assert (layout == "sharded") == (model_dir / "model.safetensors.index.json").is_file()
    trained = _backend(model_dir, *ROLES)
    _step(trained, _batch(["solver", "judge"]))
    trained.export_model(tmp_path / "final")
    base_q = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).state_dict()[
        "model.layers.0.self_attn.q_proj.weight"
    ]
    q = {}
    for name in trained.adapter_names:
        ours = AutoModelForCausalLM.from_pretrained(tmp_path / "final" / name, dtype=torch.float32)
        base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        theirs = PeftModel.from_pretrained(base, tmp_path / "final" / name / "adapter").merge_and_unload()
        want = theirs.state_dict()
        for k, v in ours.state_dict().items():
            torch.testing.assert_close(v, want[k], rtol=1e-5, atol=1e-6)
        q[name] = ours.state_dict()["model.layers.0.self_attn.q_proj.weight"]
    assert torch.equal(q["default"], base_q)
    assert not torch.equal(q["solver"], base_q) and not torch.equal(q["judge"], base_q)
    assert not torch.equal(q["solver"], q["judge"])
