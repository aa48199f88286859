"""LoRA on fused GEMMs (rllm/trainer/backends/_lora.py): the training forward and the weight merge compute
what peft computes, outputs and gradients, and every case the fused forward does not cover takes peft's own."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from peft import LoraConfig, get_peft_model
from peft.tuners.lora import Linear as LoraLinear
from transformers import AutoModelForCausalLM

from rllm.trainer.backends._lora import MergeWriter, fuse_lora_linears, layer_factors, merge_lora
from rllm.trainer.backends.local import LocalBackend
from rllm.trainer.config import TrainConfig
from rllm.utils.config import load_config

IDS = torch.tensor([[1, 520, 9531, 198, 4093, 33, 216], [1780, 314, 260, 1234, 42, 9, 77]])


def _peft_pair(model_dir: Path, **lora: object) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The same LoRA model twice, with non-zero B (a fresh adapter's B is zero: its update would be
    nothing), the second with the fused forward."""
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    cfg = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", task_type="CAUSAL_LM", **lora)
    model = get_peft_model(base, cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    fused = copy.deepcopy(model)
    assert fuse_lora_linears(fused) == sum(isinstance(m, LoraLinear) for m in fused.modules()) > 0
    return model, fused


def _loss_and_grads(model: torch.nn.Module, seed: int = 0) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    torch.manual_seed(seed)  # dropout draws the same masks in both models
    model.zero_grad()
    logits = model(input_ids=IDS, use_cache=False).logits
    loss = torch.log_softmax(logits.float(), -1)[..., :100].sum()
    loss.backward()
    return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_fused_forward_and_gradients_equal_peft(tiny_model_dir: Path, dropout: float) -> None:
    model, fused = _peft_pair(tiny_model_dir, lora_dropout=dropout)
    model.train(), fused.train()
    want, want_grads = _loss_and_grads(model)
    got, got_grads = _loss_and_grads(fused)
    assert want_grads and set(got_grads) == set(want_grads)
    assert torch.allclose(got, want, atol=1e-5, rtol=0)
    for name, g in want_grads.items():
        assert torch.allclose(got_grads[name], g, atol=1e-4, rtol=1e-4), name
    with torch.no_grad(), model.disable_adapter():  # the adapter matters: without it the logits differ
        plain = model(input_ids=IDS, use_cache=False).logits
    assert not torch.allclose(plain, want, atol=1e-3)


def test_fused_forward_under_bf16_autocast(tiny_model_dir: Path) -> None:
    model, fused = _peft_pair(tiny_model_dir)
    for m in (model, fused):  # the local backend's bf16 setting: a bf16 base, float32 adapters
        for name, p in m.named_parameters():
            if "lora_" not in name:
                p.data = p.data.to(torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want, want_grads = _loss_and_grads(model)
        got, got_grads = _loss_and_grads(fused)
    assert got.dtype == want.dtype == torch.bfloat16
    # one rounding to bf16 where peft has three: equal to bf16 resolution
    assert (got.float() - want.float()).abs().max() < 0.1
    for name, g in want_grads.items():
        assert torch.nn.functional.cosine_similarity(got_grads[name].flatten(), g.flatten(), dim=0) > 0.99, (
            name
        )


def test_cases_the_fused_forward_leaves_to_peft(tiny_model_dir: Path) -> None:
    model, fused = _peft_pair(tiny_model_dir)
    model.eval(), fused.eval()
    with torch.no_grad():
        with model.disable_adapter(), fused.disable_adapter():  # the base alone (the KL reference)
            assert torch.equal(fused(input_ids=IDS).logits, model(input_ids=IDS).logits)
        model.merge_adapter(), fused.merge_adapter()  # merged: the base layer holds the update
        assert torch.equal(fused(input_ids=IDS).logits, model(input_ids=IDS).logits)
        model.unmerge_adapter(), fused.unmerge_adapter()
        # peft's mixed batch: one adapter name per row
        names = ["default", "__base__"]
        assert torch.equal(
            fused(input_ids=IDS, adapter_names=names).logits, model(input_ids=IDS, adapter_names=names).logits
        )
    layer = next(m for m in fused.modules() if isinstance(m, LoraLinear))
    before = layer.forward
    assert fuse_lora_linears(fused) == 0 and layer.forward is before  # a second call does not wrap twice


def test_only_the_active_adapter_adds_its_update(tiny_model_dir: Path) -> None:
    model, fused = _peft_pair(tiny_model_dir)
    for m in (model, fused):
        m.add_adapter(
            "judge", LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", task_type="CAUSAL_LM")
        )
    with torch.no_grad():
        torch.manual_seed(1)
        for name, p in model.named_parameters():
            if "lora_B.judge" in name:
                p.normal_(0, 0.5)
        fused.load_state_dict(model.state_dict())  # the same weights in both, the new adapter's too
        for adapter in ("default", "judge"):
            model.set_adapter(adapter), fused.set_adapter(adapter)
            want = model(input_ids=IDS).logits
            assert torch.allclose(fused(input_ids=IDS).logits, want, atol=1e-5, rtol=0), adapter
        model.set_adapter("default")
        assert not torch.allclose(model(input_ids=IDS).logits, want, atol=1e-3)


def _delta_merged(module: LoraLinear, weight: torch.Tensor) -> torch.Tensor:
    return weight + sum(module.get_delta_weight(a) for a in module.active_adapters)


def test_merge_equals_peft_delta_weights(tiny_model_dir: Path) -> None:
    model, _ = _peft_pair(tiny_model_dir)
    layers = [m for m in model.modules() if isinstance(m, LoraLinear)]
    for layer in layers[:3]:
        w = layer.base_layer.weight.detach()
        got = merge_lora(w, layer_factors(layer))
        assert got.dtype == torch.float32 and got.data_ptr() != w.data_ptr()
        assert torch.allclose(got, _delta_merged(layer, w), atol=1e-5, rtol=0)
        assert not torch.allclose(got, w, atol=1e-3)
        # bf16 weights: merged in float32, returned in bf16
        got16 = merge_lora(w.to(torch.bfloat16), layer_factors(layer))
        assert got16.dtype == torch.bfloat16
        assert torch.allclose(got16.float(), got, atol=0.05, rtol=0.01)
        # in place, into float32 only
        target = w.clone()
        assert merge_lora(target, layer_factors(layer), inplace=True) is target
        assert torch.allclose(target, got, atol=1e-6, rtol=0)
        with pytest.raises(ValueError, match="float32"):
            merge_lora(w.to(torch.bfloat16), layer_factors(layer), inplace=True)
    assert merge_lora(layers[0].base_layer.weight, []) is layers[0].base_layer.weight


def test_merge_writer_fills_the_engines_tensor_with_the_merged_weight(tiny_model_dir: Path) -> None:
    model, _ = _peft_pair(tiny_model_dir)
    layer = next(m for m in model.modules() if isinstance(m, LoraLinear))
    w = layer.base_layer.weight.detach()
    want = _delta_merged(layer, w)
    writer = MergeWriter(w, layer_factors(layer), fan_in_fan_out=False)
    target = torch.zeros_like(w)
    writer.write_into(target)  # float32: merged straight into it
    assert torch.allclose(target, want, atol=1e-5, rtol=0)
    assert torch.equal(w, layer.base_layer.weight.detach()) and not torch.allclose(target, w, atol=1e-3)
    half = torch.zeros_like(w, dtype=torch.bfloat16)
    writer.write_into(half)  # another dtype: the merged weight, converted
    assert torch.allclose(half.float(), want, atol=0.05, rtol=0.01)
    with pytest.raises(ValueError, match=r"merge_lora\(out\) needs a float32"):
        merge_lora(w, layer_factors(layer), out=half)
    untouched = torch.zeros_like(w)
    MergeWriter(w, [], fan_in_fan_out=False).write_into(untouched)  # no adapter: the base weight
    assert torch.equal(untouched, w)


def _tiny_lora_backend(model_dir: Path) -> LocalBackend:
    cfg = load_config(
        TrainConfig,
        None,
        [f"model.path={model_dir}", "backend.device=cpu", "backend.autocast=none", "lora.rank=4"],
    )
    return LocalBackend(cfg, str(model_dir), pad_id=2)


def test_local_backend_hands_the_engine_writers_that_equal_the_merged_tensors(tiny_model_dir: Path) -> None:
    backend = _tiny_lora_backend(tiny_model_dir)
    with torch.no_grad():  # a trained adapter: B is no longer zero
        for name, p in backend.model.named_parameters():
            if "lora_B" in name:
                p.normal_(std=0.1)
    tensors = dict(backend.named_merged_weights())
    written = dict(backend.named_merged_weights(writers=True))
    assert tensors.keys() == written.keys()
    writers = [n for n, v in written.items() if isinstance(v, MergeWriter)]
    assert writers and all("proj" in n for n in writers)  # the adapted layers, and only they
    for name, value in written.items():
        if isinstance(value, MergeWriter):
            target = torch.empty_like(tensors[name])
            value.write_into(target)
            assert torch.allclose(target, tensors[name], atol=1e-6, rtol=0), name
        else:
            assert torch.equal(value, tensors[name])


def test_merge_of_a_fan_in_fan_out_layer() -> None:
    """GPT-2's Conv1D stores its weight [in, out]: the update is the transpose."""
    torch.manual_seed(0)
    A, B, w = torch.randn(4, 6), torch.randn(5, 4), torch.randn(6, 5)
    got = merge_lora(w, [(A, B, 2.0), (A, B, 0.5)], fan_in_fan_out=True)
    assert torch.allclose(got, w + 2.5 * (B @ A).t(), atol=1e-5, rtol=0)


def test_local_backend_trains_on_the_fused_layers(tiny_model_dir: Path) -> None:
    backend = _tiny_lora_backend(tiny_model_dir)
    layers = [m for m in backend.model.modules() if isinstance(m, LoraLinear)]
    assert layers and all("forward" in m.__dict__ for m in layers)
    norms = [m for m in backend.model.modules() if type(m).__name__ == "LlamaRMSNorm"]  # rllm's RMSNorm
    assert norms and all("forward" in m.__dict__ for m in norms)
