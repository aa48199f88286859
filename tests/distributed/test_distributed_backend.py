"""The distributed backend (2 gloo ranks, FSDP2, real Ray actors) against the local one on the tiny model:
the same parameters after 3 optimizer steps, LoRA and full fine-tune; exact resume from a DCP checkpoint
and resume at another world size; the exported model; a placement group the cluster cannot hold.

Tolerance. Both backends run the same float32 math on the same batches, but not in the same order: the
local backend accumulates one gradient over its micro-batches, the ranks each accumulate their half and
gloo sums the two halves (and the local backend's shared-prefix forward is off on the ranks). The
gradients then differ by float32 rounding (~1e-7 relative); AdamW divides each update by sqrt(v), which
turns a rounding difference in a near-zero gradient into a visible one, so after 3 steps at lr 0.01 the
parameters agree to PARAM_ATOL = 2e-4, i.e. 2 % of one step's largest move, while training moved them
by ~100x more (asserted, so the comparison is not vacuous).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import PAD_ID, make_batch, make_config
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from rllm.algorithms.losses import LossConfig
from rllm.trainer.backends.base import UnsupportedConfigError
from rllm.trainer.backends.distributed import DistributedBackend, split_by_tokens
from rllm.trainer.backends.local import LocalBackend, cut_micro_batches

PARAM_ATOL = 2e-4
STEPS = 3
LOSS = LossConfig(kl_coef=0.1)  # the KL term: reference logprobs come from the ranks too
MODE_OVERRIDES = {"lora": ["lora.enabled=true"], "full": ["lora.enabled=false"]}
# At most 2 rows and 16 padded tokens a micro-batch: the token budget cuts some pairs (rows of 3-15 tokens), so the
# driver's micro-batch counts must be the ranks' own cuts, not rows / 2
COMMON = ["backend.micro_batch_size=2", "backend.micro_batch_tokens=16", "algorithm.loss.kl_coef=0.1"]


def _weights(backend: Any) -> dict[str, torch.Tensor]:
    return {n: t.detach().float().cpu().clone() for n, t in backend.named_merged_weights()}


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def _train_step(backend: Any, seed: int) -> dict[str, float]:
    batch = make_batch(seed)
    ref = backend.compute_logprobs(batch, reference=True)
    metrics = backend.forward_backward(batch, LOSS, ref_logprobs=ref)
    metrics.update(backend.optim_step())
    return metrics


class Run:
    """One mode's distributed and local backends, trained side by side for STEPS steps, with a
    checkpoint of the distributed one written after step 2."""

    def __init__(self, mode: str, model_dir: Path, ckpt: Path) -> None:
        self.mode, self.model_dir, self.ckpt = mode, model_dir, ckpt
        self.overrides = MODE_OVERRIDES[mode] + COMMON
        cfg = make_config(model_dir, *self.overrides)
        self.dist = DistributedBackend(cfg, str(model_dir), pad_id=PAD_ID)
        local_cfg = cfg.model_copy(deep=True)
        local_cfg.backend.name = "local"
        self.local = LocalBackend(local_cfg, str(model_dir), pad_id=PAD_ID)
        self.initial = _weights(self.local)
        self.metrics: list[tuple[dict[str, float], dict[str, float]]] = []
        for step in range(STEPS):
            if step == 2:
                self.dist.save_state(ckpt)
            self.metrics.append((_train_step(self.dist, step), _train_step(self.local, step)))


@pytest.fixture(scope="module", params=["lora", "full"])
def run(request, ray_cluster, tiny_model_dir, tmp_path_factory) -> Any:
    r = Run(request.param, tiny_model_dir, tmp_path_factory.mktemp(f"ckpt_{request.param}") / "step_2")
    yield r
    r.dist.close()


def test_batches_exercise_uneven_shards() -> None:
    """At least one step gives the ranks different micro-batch counts, so the zero-weight padding runs."""

    def count(seed: int, shard: list[int]) -> int:
        return len(cut_micro_batches([make_batch(seed).sequences[i] for i in shard], 2, 16))

    counts = [[count(seed, s) for s in split_by_tokens(make_batch(seed), 2)] for seed in range(STEPS)]
    assert any(c[0] != c[1] for c in counts), counts
    cuts = [len(mb) for seed in range(STEPS) for mb in cut_micro_batches(make_batch(seed).sequences, 2, 16)]
    assert 1 in cuts and 2 in cuts  # the budget cuts some pairs, and keeps others
    shards = split_by_tokens(make_batch(0), 2)
    assert sorted(i for s in shards for i in s) == list(range(8))  # a partition of the batch


def test_two_ranks_match_local_after_three_steps(run: Run) -> None:
    for step, (d, loc) in enumerate(run.metrics):
        for key in ("train/loss", "train/grad_norm", "train/entropy", "train/clip_fraction", "train/kl_ref"):
            assert d[key] == pytest.approx(loc[key], rel=1e-4, abs=1e-6), (step, key)
        assert d["train/lr"] == loc["train/lr"]
    assert run.dist.step == run.local.step == STEPS
    dist_w, local_w = _weights(run.dist), _weights(run.local)
    assert _max_diff(dist_w, local_w) <= PARAM_ATOL
    assert _max_diff(local_w, run.initial) > 100 * PARAM_ATOL  # training moved the weights
    # the policy's logprobs agree too
    batch = make_batch(7)
    a, b = run.dist.compute_logprobs(batch), run.local.compute_logprobs(batch)
    assert max(abs(x - y) for ra, rb in zip(a, b) for x, y in zip(ra, rb)) < 1e-4
    if run.mode == "lora":  # the weight sync of a LoRA run sends only the adapted weights
        changed = {n for n, _ in run.dist.named_merged_weights(changed_only=True)}
        assert changed == {n for n, _ in run.local.named_merged_weights(changed_only=True)}
        assert changed and all(n.endswith("_proj.weight") for n in changed)  # adapted linears, no norms
        assert len(changed) < len(run.dist.named_merged_weights())


def test_adapter_dir_matches_local(run: Run, tmp_path: Path) -> None:
    if run.mode != "lora":
        with pytest.raises(UnsupportedConfigError, match="lora.enabled=true"):
            run.dist.save_adapter(tmp_path / "adapter")
        return
    run.dist.save_adapter(tmp_path / "dist")
    run.local.save_adapter(tmp_path / "local")
    assert (tmp_path / "dist" / "adapter_config.json").is_file()
    a = load_file(str(tmp_path / "dist" / "adapter_model.safetensors"))
    b = load_file(str(tmp_path / "local" / "adapter_model.safetensors"))
    assert a.keys() == b.keys() and a
    assert max(float((a[k] - b[k]).abs().max()) for k in a) <= PARAM_ATOL


def test_export_round_trips(run: Run, tmp_path: Path) -> None:
    """The exported HF model (LoRA merged) gives the policy's logprobs."""
    run.dist.export_model(tmp_path / "export")
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "export", dtype=torch.float32).eval()
    batch = make_batch(11)
    policy = run.dist.compute_logprobs(batch)
    for seq, row in zip(batch.sequences, policy):
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([seq.input_ids])).logits[0].float()
        lp = torch.log_softmax(logits[:-1], dim=-1).gather(1, torch.tensor(seq.input_ids[1:]).unsqueeze(1))[
            :, 0
        ]
        for i in range(1, len(seq.input_ids)):
            if seq.loss_mask[i]:
                assert abs(float(lp[i - 1]) - row[i]) < 1e-5


def test_resume_is_exact_and_works_on_one_rank(run: Run, tmp_path: Path) -> None:
    """The step-2 checkpoint, loaded by fresh 2-rank and 1-rank backends, continues to step 3 like the
    uninterrupted run: exactly on 2 ranks (same shards, same sums), to PARAM_ATOL on 1 (the reduction
    order changes). A 1-rank checkpoint loads back on 2 ranks exactly."""
    uninterrupted = _weights(run.dist)
    two = DistributedBackend(make_config(run.model_dir, *run.overrides), str(run.model_dir), pad_id=PAD_ID)
    try:
        two.load_state(run.ckpt)
        assert two.step == 2
        _train_step(two, 2)
        assert two.step == STEPS
        resumed = _weights(two)
        assert all(torch.equal(resumed[k], uninterrupted[k]) for k in uninterrupted)

        one_cfg = make_config(run.model_dir, *run.overrides, "backend.distributed.world_size=1")
        one = DistributedBackend(one_cfg, str(run.model_dir), pad_id=PAD_ID)
        try:
            one.load_state(run.ckpt)
            _train_step(one, 2)
            on_one = _weights(one)
            assert _max_diff(on_one, uninterrupted) <= PARAM_ATOL
            one.save_state(tmp_path / "one_rank")
        finally:
            one.close()
        two.load_state(tmp_path / "one_rank")
        assert two.step == STEPS
        back = _weights(two)
        assert all(torch.equal(back[k], on_one[k]) for k in on_one)
    finally:
        two.close()


def test_placement_group_the_cluster_cannot_hold_is_refused(ray_cluster, tiny_model_dir) -> None:
    groups_before = set(ray_cluster.util.placement_group_table())
    cpus_before = ray_cluster.available_resources().get("CPU", 0.0)
    cfg = make_config(tiny_model_dir, "backend.distributed.cpus_per_rank=64")
    with pytest.raises(UnsupportedConfigError, match=r"need CPU 128 \(the cluster has \d+\)"):
        DistributedBackend(cfg, str(tiny_model_dir), pad_id=PAD_ID)
    # nothing reserved, nothing left running (earlier tests' backends may still be freeing theirs)
    new_groups = {k: g for k, g in ray_cluster.util.placement_group_table().items() if k not in groups_before}
    assert all(g["state"] == "REMOVED" for g in new_groups.values())
    assert ray_cluster.available_resources().get("CPU", 0.0) >= cpus_before
    assert ray_cluster.is_initialized()  # the module's connection, which the backend did not own, stays up
