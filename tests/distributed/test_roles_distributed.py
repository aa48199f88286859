"""Separate weights per role on the distributed backend (2 gloo ranks, FSDP2, real Ray actors) against the local
backend on the tiny model: three adapters (``solver``, ``judge`` at its own learning rate, and ``default`` for the
unlisted role), two steps, the same adapter tensors and per-adapter metrics. ``default`` (both steps) and
``judge`` (step 2) have one row, so one rank holds none of their rows and runs only zero-weight passes with them
active (it would hang there otherwise); ``judge`` has no row at all in step 1, so the checkpoint written between
the steps holds an optimizer that never stepped (its first step must still be AdamW's first, live and resumed).
Also adapter files, a merged export per adapter, and an exact resume of every adapter and optimizer.

Tolerance: as in test_distributed_backend.py (the ranks sum their halves of each gradient in another order, and
AdamW turns rounding into up to ~1e-4 in near-zero gradients' coordinates): every adapter within PARAM_ATOL after
the first step (seen: 1.3e-6). After the second, one coordinate of solver's A (zero gradient in step 1, as B
starts at 0) has a gradient of 8e-9, AdamW's eps, where rounding moves the update by ~6 % of lr (seen: 6e-4);
so there at most 0.1 % of an adapter's coordinates may differ by more than PARAM_ATOL, none by more than 0.1 x
lr. Training moves the adapters by 20-100x more (judge: one step at lr 0.004), which is asserted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import PAD_ID, make_batch, make_config
from safetensors.torch import load_file

from rllm.algorithms.losses import LossConfig
from rllm.trainer.backends.base import UnsupportedConfigError
from rllm.trainer.backends.distributed import DistributedBackend
from rllm.trainer.backends.local import LocalBackend
from rllm.types import TrainBatch

pytestmark = pytest.mark.timeout(900)  # a rank out of step with the other would hang in a collective

PARAM_ATOL = 2e-4
ROLES = ["lora.enabled=true", "backend.micro_batch_size=2", "roles.solver.adapter=solver"]
ROLES += ["roles.judge.adapter=judge", "roles.judge.lr=0.004"]
LOSS = LossConfig()


def _batch(seed: int, judge: bool) -> TrainBatch:
    """make_batch's 8 rows (4 groups of 2): groups 0-2 solve; the last group's two rows are one judge row (or a
    solver row without ``judge``) and one row of an unlisted role (the ``default`` adapter)."""
    batch = make_batch(seed)
    for i, s in enumerate(batch.sequences):
        s.trajectory_name = "solver" if i < 6 else ("judge" if i == 6 and judge else "other")
    if not judge:
        batch.sequences[6].trajectory_name = "solver"
    return batch


def _step(backend: Any, batch: TrainBatch) -> dict[str, float]:
    return {**backend.forward_backward(batch, LOSS), **backend.optim_step()}


def _tensors(backend: Any) -> dict[str, torch.Tensor]:
    """adapter/module/A|B -> tensor, from named_adapter_tensors."""
    return {
        f"{name}/{module}/{ab}": t.detach().float().cpu().clone()
        for name, layers in backend.named_adapter_tensors().items()
        for module, pair in layers.items()
        for ab, t in zip("AB", pair)
    }


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], prefix: str = "") -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a if k.startswith(prefix))


class Run:
    def __init__(self, model_dir: Path, ckpt: Path) -> None:
        self.model_dir, self.ckpt = model_dir, ckpt
        cfg = make_config(model_dir, *ROLES)
        self.dist = DistributedBackend(cfg, str(model_dir), pad_id=PAD_ID)
        local_cfg = cfg.model_copy(deep=True)
        local_cfg.backend.name = "local"
        self.local = LocalBackend(local_cfg, str(model_dir), pad_id=PAD_ID)
        self.initial = _tensors(self.local)
        self.dist_initial = _tensors(self.dist)
        self.metrics = [(_step(self.dist, _batch(0, False)), _step(self.local, _batch(0, False)))]
        self.after_one = _tensors(self.dist)
        self.local_after_one = _tensors(self.local)
        self.dist.save_state(ckpt)
        self.metrics.append((_step(self.dist, _batch(1, True)), _step(self.local, _batch(1, True))))


@pytest.fixture(scope="module")
def run(ray_cluster, tiny_model_dir, tmp_path_factory) -> Any:
    r = Run(tiny_model_dir, tmp_path_factory.mktemp("roles_ckpt") / "step_1")
    yield r
    r.dist.close()


def test_the_second_batch_leaves_a_rank_without_rows_of_two_adapters(run: Run) -> None:
    shards, _, _, counts = run.dist._shards(_batch(1, True))
    assert list(counts) == ["default", "solver", "judge"] and counts["judge"] == counts["default"] == 1
    names = [
        {run.dist._role_adapters.get(_batch(1, True).sequences[i].trajectory_name, "default") for i in s}
        for s in shards
    ]
    assert any("judge" not in n and "default" not in n for n in names), names


def test_each_adapter_updates_as_on_the_local_backend(run: Run) -> None:
    assert run.dist.adapter_names == run.local.adapter_names == ["default", "solver", "judge"]
    assert _max_diff(run.dist_initial, run.initial) == 0.0  # the same initialisation on the ranks
    for step, (d, loc) in enumerate(run.metrics):
        for key, value in loc.items():
            if key.startswith(("adapter/", "train/")):
                assert d[key] == pytest.approx(value, rel=1e-4, abs=1e-6), (step, key)
    assert run.metrics[1][0]["adapter/judge/lr"] == pytest.approx(0.004)
    assert "adapter/judge/loss" not in run.metrics[0][0]  # no judge rows in step 1
    assert _max_diff(run.after_one, run.local_after_one) <= PARAM_ATOL  # one step: every adapter
    dist_w, local_w = _tensors(run.dist), _tensors(run.local)
    for name in run.local.adapter_names:
        diffs = torch.cat(
            [(dist_w[k] - local_w[k]).abs().flatten() for k in dist_w if k.startswith(f"{name}/")]
        )
        assert float((diffs > PARAM_ATOL).float().mean()) <= 1e-3, name
        assert float(diffs.max()) <= 1e-3, name  # 0.1 x lr
        assert _max_diff(local_w, run.initial, f"{name}/") > 10 * PARAM_ATOL, (
            name
        )  # training moved it (judge: one step at 0.004)
    # judge had no rows in step 1: untouched there
    assert _max_diff(run.after_one, run.dist_initial, "judge/") == 0.0
    # each row's logprobs under its own adapter agree too
    batch = _batch(7, True)
    a, b = run.dist.compute_logprobs(batch), run.local.compute_logprobs(batch)
    assert max(abs(x - y) for ra, rb in zip(a, b) for x, y in zip(ra, rb)) < 1e-4
    # only the adapters stepped since the last call
    assert set(run.dist.named_adapter_tensors(changed_only=True)) == set()


def test_adapter_files_and_export_match_local(run: Run, tmp_path: Path) -> None:
    run.dist.save_adapter(tmp_path / "dist", adapter="judge")
    run.local.save_adapter(tmp_path / "local", adapter="judge")
    a = load_file(str(tmp_path / "dist" / "adapter_model.safetensors"))
    b = load_file(str(tmp_path / "local" / "adapter_model.safetensors"))
    assert a.keys() == b.keys() and a
    assert max(float((a[k] - b[k]).abs().max()) for k in a) <= PARAM_ATOL
    with pytest.raises(ValueError, match="no adapter 'critic'"):
        run.dist.save_adapter(tmp_path / "x", adapter="critic")
    run.dist.export_model(tmp_path / "dexp")
    run.local.export_model(tmp_path / "lexp")
    for name in run.local.adapter_names:
        d = load_file(str(tmp_path / "dexp" / name / "model.safetensors"))
        loc = load_file(str(tmp_path / "lexp" / name / "model.safetensors"))
        assert d.keys() == loc.keys()
        assert max(float((d[k] - loc[k]).abs().max()) for k in d) <= PARAM_ATOL
        assert (tmp_path / "dexp" / name / "adapter" / "adapter_config.json").is_file()


def test_resume_restores_every_adapter_and_optimizer_exactly(run: Run) -> None:
    uninterrupted = _tensors(run.dist)
    cfg = make_config(run.model_dir, *ROLES)
    again = DistributedBackend(cfg, str(run.model_dir), pad_id=PAD_ID)
    try:
        again.load_state(run.ckpt)
        assert again.step == 1
        assert _max_diff(_tensors(again), run.after_one) == 0.0
        _step(again, _batch(1, True))
        assert all(torch.equal(t, uninterrupted[k]) for k, t in _tensors(again).items())
    finally:
        again.close()
    no_roles = DistributedBackend(make_config(run.model_dir, "lora.enabled=true"), str(run.model_dir), PAD_ID)
    try:
        with pytest.raises(UnsupportedConfigError, match="resume with the roles it was saved with"):
            no_roles.load_state(run.ckpt)
    finally:
        no_roles.close()


def test_a_role_starts_from_its_init_adapter_on_every_rank(run: Run, tmp_path: Path) -> None:
    """``roles.<role>.init_adapter``: each rank loads the whole adapter before sharding, so the sharded one
    gathers back to the saved weights; the other adapters start fresh (B = 0)."""
    run.local.save_adapter(tmp_path / "judge", adapter="judge")  # trained: B is not 0
    saved = run.local.named_adapter_tensors()["judge"]
    cfg = make_config(run.model_dir, *ROLES, f"roles.solver.init_adapter={tmp_path / 'judge'}")
    started = DistributedBackend(cfg, str(run.model_dir), pad_id=PAD_ID)
    try:
        tensors = started.named_adapter_tensors()
        for module, (a, b) in saved.items():
            assert torch.equal(tensors["solver"][module][0], a) and torch.equal(
                tensors["solver"][module][1], b
            )
        assert all(not b.any() for _, b in tensors["judge"].values())
        assert any(b.any() for _, b in tensors["solver"].values())
    finally:
        started.close()
