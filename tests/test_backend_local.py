"""The local training backend on the tiny model: updates, micro-batching, weight sync to the engine,
export, the KL reference, and save/load of the full training state."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from rllm.algorithms.losses import LossConfig
from rllm.inference.base import SamplingParams
from rllm.inference.local import LocalEngine
from rllm.trainer.backends.base import UnsupportedConfigError
from rllm.trainer.backends.local import LocalBackend, cut_micro_batches, micro_batch_order
from rllm.trainer.config import TrainConfig
from rllm.types import TrainBatch, TrainSequence
from rllm.utils.config import load_config

PAD_ID = 2
PROMPTS = [[1, 520, 9531, 198, 4093], [1, 33, 216, 34], [1780, 314, 260, 1234, 42, 9, 77]]


def _config(model_dir: Path, *overrides: str) -> TrainConfig:
    base = [
        f"model.path={model_dir}",
        "backend.device=cpu",
        "backend.autocast=none",
        "rollout.temperature=1.0",
        "lora.rank=4",
        "lora.alpha=8",
        "optim.lr=0.01",
        "optim.grad_clip=null",
        "trainer.steps=10",
    ]
    return load_config(TrainConfig, None, base + list(overrides))


def _backend(model_dir: Path, *overrides: str) -> LocalBackend:
    return LocalBackend(_config(model_dir, *overrides), str(model_dir), pad_id=PAD_ID)


def _batch(seed: int = 0, n: int = 8) -> TrainBatch:
    """Sequences of different lengths with a prompt part, a masked-out hole and +-1 advantages."""
    gen = torch.Generator().manual_seed(seed)
    sequences = []
    for i in range(n):
        prompt_len = int(torch.randint(2, 6, (1,), generator=gen))
        response_len = int(torch.randint(1, 7, (1,), generator=gen))
        ids = torch.randint(3, 49152, (prompt_len + response_len,), generator=gen).tolist()
        mask = [0] * prompt_len + [1] * response_len
        if response_len > 2:
            mask[prompt_len + 1] = 0  # a token spliced in by the environment
        advantage = 1.0 if i % 2 == 0 else -1.0
        sequences.append(
            TrainSequence(
                input_ids=ids,
                loss_mask=mask,
                rollout_logprobs=[-10.8 * m for m in mask],
                advantages=[advantage * m for m in mask],
                group_id=f"g{i // 2}",
            )
        )
    return TrainBatch(sequences=sequences)


def _flat(rows: list[list[float]]) -> torch.Tensor:
    return torch.tensor([x for row in rows for x in row])


def _grads(backend: LocalBackend) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in backend.model.named_parameters() if p.grad is not None}


def _params(backend: LocalBackend) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in backend.model.named_parameters() if p.requires_grad}


@pytest.fixture(scope="module")
def engine(tiny_model_dir: Path) -> LocalEngine:
    """One float32 engine; every test that uses it first syncs its own backend's weights into it."""
    return LocalEngine.from_pretrained(str(tiny_model_dir), device="cpu", dtype="float32")


@pytest.mark.parametrize("lora", [True, False])
def test_step_changes_trainable_parameters(tiny_model_dir, lora: bool) -> None:
    backend = _backend(tiny_model_dir, f"lora.enabled={str(lora).lower()}")
    before = _params(backend)
    metrics = backend.forward_backward(_batch(), LossConfig())
    assert {"train/loss", "train/entropy", "train/clip_fraction", "train/ratio_mean"} <= set(metrics)
    out = backend.optim_step()
    assert out["train/grad_norm"] > 0 and out["train/lr"] == pytest.approx(0.01)
    after = _params(backend)
    changed = [n for n in before if not torch.equal(before[n], after[n])]
    if lora:
        assert changed and all("lora_" in n for n in before)  # only adapters train
        assert any("lora_B" in n for n in changed)
    else:
        assert len(changed) == len(before)
    assert all(p.grad is None for p in backend.model.parameters())  # zeroed for the next step
    assert backend.step == 1


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_micro_batching_gives_the_full_batch_gradient(tiny_model_dir, agg: str) -> None:
    backend = _backend(tiny_model_dir, "lora.enabled=false", "backend.micro_batch_size=8")
    batch, loss = _batch(seed=1), LossConfig(agg=agg)
    # behaviour logprobs away from the current ones, so some ratios are clipped
    old = [[0.0] + [-10.0 + 0.3 * (j % 3) for j in range(len(s.input_ids) - 1)] for s in batch.sequences]
    big = backend.forward_backward(batch, loss, old_logprobs=old)
    full = _grads(backend)
    backend.optimizer.zero_grad(set_to_none=True)
    backend.cfg = _config(tiny_model_dir, "lora.enabled=false", "backend.micro_batch_size=1")
    small = backend.forward_backward(batch, loss, old_logprobs=old)
    micro = _grads(backend)
    assert full.keys() == micro.keys() and full
    # Relative to each tensor's largest entry: micro-batches sum in another order, and how much that moves
    # a tiny entry depends on the machine's BLAS kernels (an elementwise atol of 1e-7 failed on one CPU).
    for name in full:
        scale = float(full[name].abs().max())
        assert float((full[name] - micro[name]).abs().max()) <= 1e-4 * scale + 1e-12, name
    assert small["train/loss"] == pytest.approx(big["train/loss"], rel=1e-5)
    assert small["train/clip_fraction"] == pytest.approx(big["train/clip_fraction"], rel=1e-5)
    assert 0 < big["train/clip_fraction"] < 1


def test_cut_micro_batches_bounds_rows_and_padded_tokens() -> None:
    """Every row once, in micro_batch_order; at most max_rows rows and max_tokens padded tokens (rows x the
    longest) a micro-batch, except a row longer than the budget, alone; a budget of 0 cuts by rows only."""
    batch = _grouped_batch(seed=3, groups=5, group_size=4)
    seqs = batch.sequences
    order = micro_batch_order(seqs)
    assert cut_micro_batches(seqs, 8, 0) == [order[i : i + 8] for i in range(0, len(order), 8)]
    for max_rows, max_tokens in [(8, 24), (3, 30), (16, 5)]:
        cuts = cut_micro_batches(seqs, max_rows, max_tokens)
        assert [i for mb in cuts for i in mb] == order
        for mb in cuts:
            longest = max(len(seqs[i].input_ids) for i in mb)
            assert len(mb) <= max_rows
            assert len(mb) * longest <= max_tokens or len(mb) == 1
    # the budget binds: 5 tokens is shorter than every row, so every row runs alone
    assert len(cut_micro_batches(seqs, 16, 5)) == len(seqs)


@pytest.mark.parametrize("share_prefix", [True, False])
def test_token_budget_gives_the_full_batch_gradient(tiny_model_dir, share_prefix: bool) -> None:
    """backend.micro_batch_tokens splits a batch (and its groups: a shared prompt runs once per micro-batch)
    without changing the loss or the gradient."""
    batch = _grouped_batch(seed=2)
    results = {}
    for budget in (0, 20):
        backend = _backend(
            tiny_model_dir,
            "lora.enabled=false",
            "backend.micro_batch_size=16",
            f"backend.micro_batch_tokens={budget}",
            f"backend.share_prefix={share_prefix}",
        )
        assert len(backend._micro_batches(batch)) == (
            1 if budget == 0 else len(cut_micro_batches(batch.sequences, 16, 20))
        )
        metrics = backend.forward_backward(batch, LossConfig())
        results[budget] = (metrics["train/loss"], _grads(backend))
    assert len(cut_micro_batches(batch.sequences, 16, 20)) > 2
    (loss_one, g_one), (loss_cut, g_cut) = results[0], results[20]
    assert loss_cut == pytest.approx(loss_one, rel=1e-5)
    assert g_one.keys() == g_cut.keys() and g_one
    for name in g_one:
        scale = float(g_one[name].abs().max())
        assert float((g_one[name] - g_cut[name]).abs().max()) <= 1e-4 * scale + 1e-12, name


def test_forward_backward_reports_the_logprobs_it_trained_on(tiny_model_dir) -> None:
    """logprobs_out: the same values compute_logprobs gives before the step (same alignment, one forward),
    in the batch's order though micro-batches sort it; the gradient is unchanged by asking."""
    backend = _backend(tiny_model_dir, "backend.micro_batch_size=3")
    batch = _batch(seed=2)
    expected = backend.compute_logprobs(batch)
    plain_metrics = backend.forward_backward(batch, LossConfig())
    plain = _grads(backend)
    backend.optimizer.zero_grad(set_to_none=True)
    logprobs: list[list[float]] = []
    metrics = backend.forward_backward(batch, LossConfig(), logprobs_out=logprobs)
    assert [len(row) for row in logprobs] == [len(s.input_ids) for s in batch.sequences]
    torch.testing.assert_close(_flat(logprobs), _flat(expected), rtol=0, atol=1e-5)
    assert metrics["train/loss"] == pytest.approx(plain_metrics["train/loss"], rel=1e-6)
    for name, grad in _grads(backend).items():
        torch.testing.assert_close(grad, plain[name])


@torch.no_grad()
def _greedy(model: torch.nn.Module, prompt: list[int], max_new: int) -> list[int]:
    ids = list(prompt)
    for _ in range(max_new):
        logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1]
        ids.append(int(logits.argmax()))
    return ids[len(prompt) :]


def _completions_batch(completions) -> TrainBatch:
    return TrainBatch(
        sequences=[
            TrainSequence(
                input_ids=c.prompt_ids + c.completion_ids,
                loss_mask=[0] * len(c.prompt_ids) + [1] * len(c.completion_ids),
                rollout_logprobs=[0.0] * len(c.prompt_ids) + c.logprobs,
                advantages=[0.0] * (len(c.prompt_ids) + len(c.completion_ids)),
            )
            for c in completions
        ]
    )


@pytest.mark.parametrize("lora", [True, False])
def test_weight_sync_engine_matches_backend(tiny_model_dir, engine, lora: bool) -> None:
    backend = _backend(tiny_model_dir, f"lora.enabled={str(lora).lower()}", "optim.lr=0.05")
    backend.sync_weights_to(engine)
    greedy = SamplingParams(temperature=0.0, max_tokens=8)
    before = [engine.generate_sync(p, greedy)[0].completion_ids for p in PROMPTS]
    for step in range(2):  # the second sync of a LoRA run sends only the adapted weights
        backend.forward_backward(_batch(seed=step), LossConfig())
        backend.optim_step()
        backend.sync_weights_to(engine)
        assert engine.weight_version == backend.step == step + 1
    backend.model.eval()
    after = [engine.generate_sync(p, greedy)[0].completion_ids for p in PROMPTS]
    assert after != before  # the update reached the engine
    assert after == [_greedy(backend.model, p, 8) for p in PROMPTS]
    # sampled tokens: the engine's logprobs are the trainer's within float32 noise
    sampled = [
        engine.generate_sync(p, SamplingParams(temperature=1.0, max_tokens=6, seed=i))[0]
        for i, p in enumerate(PROMPTS)
    ]
    batch = _completions_batch(sampled)
    trainer_lp = backend.compute_logprobs(batch)
    for c, lp in zip(sampled, trainer_lp):
        assert len(lp) == len(c.prompt_ids) + len(c.completion_ids) and lp[0] == 0.0
        assert torch.allclose(
            torch.tensor(lp[len(c.prompt_ids) :]), torch.tensor(c.logprobs), atol=1e-4, rtol=0
        )
        assert c.weight_version == 2


@pytest.mark.parametrize("lora", [True, False])
def test_export_model_matches_backend(tiny_model_dir, tmp_path, lora: bool) -> None:
    backend = _backend(tiny_model_dir, f"lora.enabled={str(lora).lower()}", "optim.lr=0.05")
    backend.forward_backward(_batch(), LossConfig())
    backend.optim_step()
    backend.export_model(tmp_path / "export")
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "export", dtype=torch.float32).eval()
    assert exported.config.use_cache  # a served model decodes with a KV cache
    assert not (tmp_path / "export" / "adapter_config.json").exists()  # LoRA merged, standalone
    ids = torch.tensor([PROMPTS[2]])
    backend.model.eval()
    with torch.no_grad():
        expected = backend.model(input_ids=ids, use_cache=False).logits
        base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)(input_ids=ids).logits
        got = exported(input_ids=ids).logits
    assert not torch.allclose(expected, base, atol=1e-3)  # the step changed the model
    assert torch.allclose(got, expected, atol=1e-4, rtol=0)


def test_kl_reference_full_finetune(tiny_model_dir) -> None:
    batch = _batch()
    plain = _backend(tiny_model_dir, "lora.enabled=false")
    assert plain._reference is None  # no second copy of the model when the KL term is off
    with pytest.raises(UnsupportedConfigError, match="kl_coef > 0"):
        plain.compute_logprobs(batch, reference=True)
    initial = plain.compute_logprobs(batch)

    backend = _backend(tiny_model_dir, "lora.enabled=false", "algorithm.loss.kl_coef=0.1")
    assert backend._reference is not None
    assert not any(p.requires_grad for p in backend._reference.parameters())
    ref = backend.compute_logprobs(batch, reference=True)
    metrics = backend.forward_backward(batch, LossConfig(kl_coef=0.1), ref_logprobs=ref)
    assert metrics["train/kl_ref"] == pytest.approx(0.0, abs=1e-6)  # policy == reference before a step
    backend.optim_step()
    assert backend.compute_logprobs(batch, reference=True) == ref == initial  # the reference stays put
    assert backend.compute_logprobs(batch) != ref


def test_kl_reference_lora_disables_the_adapter(tiny_model_dir) -> None:
    batch = _batch()
    backend = _backend(tiny_model_dir, "algorithm.loss.kl_coef=0.1", "optim.lr=0.05")
    assert backend._reference is None  # LoRA's reference is the base model under disable_adapter
    initial = backend.compute_logprobs(batch)
    backend.forward_backward(batch, LossConfig())
    backend.optim_step()
    ref = backend.compute_logprobs(batch, reference=True)
    policy = backend.compute_logprobs(batch)
    assert torch.allclose(_flat(ref), _flat(initial), atol=1e-5)
    assert not torch.allclose(_flat(policy), _flat(ref), atol=1e-3)
    assert backend.model.training  # compute_logprobs restores train mode


@pytest.mark.parametrize("lora", [True, False])
def test_save_and_load_state_round_trip(tiny_model_dir, tmp_path, lora: bool) -> None:
    flag = f"lora.enabled={str(lora).lower()}"
    a = _backend(tiny_model_dir, flag, "optim.schedule=cosine", "optim.warmup_steps=1")
    for seed in range(2):
        a.forward_backward(_batch(seed), LossConfig())
        a.optim_step()
    a.save_state(tmp_path / "ckpt")
    torch.manual_seed(123)  # the loaded state must bring the RNG back too

    b = _backend(tiny_model_dir, flag, "optim.schedule=cosine", "optim.warmup_steps=1")
    b.load_state(tmp_path / "ckpt")
    assert b.step == 2
    assert b.scheduler.state_dict()["last_epoch"] == a.scheduler.state_dict()["last_epoch"]
    assert b.optimizer.param_groups[0]["lr"] == a.optimizer.param_groups[0]["lr"]
    pa, pb = _params(a), _params(b)
    assert pa.keys() == pb.keys()
    assert all(torch.equal(pa[n], pb[n]) for n in pa)
    sa, sb = a.optimizer.state_dict()["state"], b.optimizer.state_dict()["state"]
    assert sa.keys() == sb.keys() and sa
    for k in sa:
        for name in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(sa[k][name], sb[k][name]), (k, name)
    # the same next step from both gives the same parameters (moments and schedule restored)
    for backend in (a, b):
        backend.forward_backward(_batch(seed=5), LossConfig())
        backend.optim_step()
    pa, pb = _params(a), _params(b)
    assert all(torch.equal(pa[n], pb[n]) for n in pa)


def _grouped_batch(seed: int = 0, groups: int = 3, group_size: int = 4) -> TrainBatch:
    """GRPO-shaped batch: each group's answers share their prompt token for token."""
    gen = torch.Generator().manual_seed(seed)
    sequences = []
    for g in range(groups):
        prompt = torch.randint(
            3, 49152, (int(torch.randint(3, 9, (1,), generator=gen)),), generator=gen
        ).tolist()
        for i in range(group_size):
            response_len = int(torch.randint(1, 7, (1,), generator=gen))
            ids = prompt + torch.randint(3, 49152, (response_len,), generator=gen).tolist()
            mask = [0] * len(prompt) + [1] * response_len
            if response_len > 2:
                mask[len(prompt) + 1] = 0
            advantage = 1.0 if i % 2 == 0 else -1.0
            sequences.append(
                TrainSequence(
                    input_ids=ids,
                    loss_mask=mask,
                    rollout_logprobs=[-10.8 * m for m in mask],
                    advantages=[advantage * m for m in mask],
                    group_id=f"g{g}",
                )
            )
    return TrainBatch(sequences=sequences)


@pytest.mark.parametrize("lora", [True, False])
def test_shared_prefix_forward_equals_flat_forward(tiny_model_dir, lora: bool) -> None:
    """Running each distinct prompt once and only the answers per row gives the flat forward's
    logprobs, loss and gradients (it is an exact rewrite, not an approximation)."""
    batch = _grouped_batch()
    results = {}
    for share in (False, True):
        backend = _backend(
            tiny_model_dir,
            f"lora.enabled={lora}",
            f"backend.share_prefix={share}",
            "backend.micro_batch_size=8",
        )
        logprobs = _flat(backend.compute_logprobs(batch))
        metrics = backend.forward_backward(batch, LossConfig())
        results[share] = (logprobs, metrics["train/loss"], _grads(backend))
    (lp_flat, loss_flat, g_flat), (lp_shared, loss_shared, g_shared) = results[False], results[True]
    assert torch.allclose(lp_flat, lp_shared, atol=1e-5)
    assert loss_shared == pytest.approx(loss_flat, rel=1e-5, abs=1e-7)
    assert g_flat.keys() == g_shared.keys()
    for name in g_flat:
        scale = float(g_flat[name].abs().max())  # float rounding differs between the two paths
        assert torch.allclose(g_flat[name], g_shared[name], rtol=1e-4, atol=1e-5 * scale), name


def test_shared_prefix_refuses_gradient_checkpointing(tiny_model_dir) -> None:
    from rllm.trainer.agent_trainer import check_config

    cfg = _config(tiny_model_dir, "backend.gradient_checkpointing=true")
    with pytest.raises(UnsupportedConfigError, match="share_prefix"):
        check_config(cfg, LocalBackend.capabilities)


def test_skipped_zero_advantage_rows_only_count_in_the_normaliser(tiny_model_dir) -> None:
    """Dropping zero-advantage rows but counting them in loss_norm_* gives the same update as training on
    them: the zero-variance filter saves compute without changing the gradient."""
    full = _grouped_batch(seed=3)
    for s in full.sequences:
        if s.group_id == "g2":  # a group with no signal: every advantage 0
            s.advantages = [0.0] * len(s.advantages)
    kept = TrainBatch(
        sequences=[s for s in full.sequences if s.group_id != "g2"],
        loss_norm_tokens=float(full.num_response_tokens),
        loss_norm_sequences=float(len(full.sequences)),
    )
    grads = []
    for batch in (full, kept):
        backend = _backend(tiny_model_dir, "backend.micro_batch_size=4")
        backend.forward_backward(batch, LossConfig())
        grads.append(_grads(backend))
    for name in grads[0]:
        scale = float(grads[0][name].abs().max())
        assert torch.allclose(grads[0][name], grads[1][name], rtol=1e-4, atol=1e-5 * scale), name
