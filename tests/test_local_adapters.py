"""Several LoRA adapters in the local engine at once: a batch that mixes rows of adapter a, adapter b and no
adapter must give each row the greedy tokens and logprobs of that row decoded alone by the model with its
adapter merged (peft's merge_and_unload of the same A/B), on the tiny model."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import httpx
import pytest
import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM

from rllm.gateway.app import create_app
from rllm.gateway.http_upstream import HTTPUpstream
from rllm.gateway.server import GatewayServer
from rllm.gateway.traces import TraceStore
from rllm.inference.base import EngineBase, EngineCapabilities, SamplingParams, WeightSyncError
from rllm.inference.local import LocalEngine

RANK, ALPHA = 4, 8
TARGETS = ["q_proj", "v_proj", "o_proj", "down_proj"]
GREEDY = SamplingParams(temperature=0.0, max_tokens=8)
TEXTS = ["Hello there, how are", "The capital of France is the city of", "1 2 3", "What"]
# float32 throughout; the batched deltas and peft's merged weights sum in different orders.
LOGPROB_ATOL = 1e-4


def _peft_adapter(model_dir: Path, seed: int) -> PeftModel:
    """A random (non-zero) LoRA adapter on the tiny model, made by peft."""
    torch.manual_seed(seed)
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    config = LoraConfig(r=RANK, lora_alpha=ALPHA, target_modules=TARGETS, init_lora_weights=False)
    model = get_peft_model(base, config)
    with torch.no_grad():  # peft's random B is small; make the adapter change what the model says
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.mul_(20.0)
    return model.eval()


def _adapter_tensors(peft_model: PeftModel) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """{base module name: (lora_A [r, in], lora_B [out, r])}: the engine's load_adapters format."""
    out: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    for name, module in peft_model.named_modules():
        if hasattr(module, "lora_A") and "default" in getattr(module, "lora_A", {}):
            base_name = name.removeprefix("base_model.model.")
            out[base_name] = (
                module.lora_A["default"].weight.detach(),
                module.lora_B["default"].weight.detach(),
            )
    assert out
    return out


@pytest.fixture(scope="module")
def setup(tiny_model_dir: Path):
    adapters = {"a": _peft_adapter(tiny_model_dir, 1), "b": _peft_adapter(tiny_model_dir, 2)}
    tensors = {name: _adapter_tensors(m) for name, m in adapters.items()}
    merged = {name: m.merge_and_unload().eval() for name, m in adapters.items()}
    merged[None] = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    engine = LocalEngine.from_pretrained(str(tiny_model_dir), device="cpu", dtype="float32")
    engine.load_adapters(tensors, scaling=ALPHA / RANK, version=3)
    return engine, merged, tensors


@torch.no_grad()
def _reference(model: torch.nn.Module, prompt: list[int], max_new: int) -> tuple[list[int], list[float]]:
    """Greedy tokens and their logprobs, one full forward pass per token, the row alone."""
    ids, lps = list(prompt), []
    for _ in range(max_new):
        logp = torch.log_softmax(model(torch.tensor([ids])).logits[0, -1].float(), dim=-1)
        tok = int(logp.argmax())
        ids.append(tok)
        lps.append(float(logp[tok]))
    return ids[len(prompt) :], lps


def test_mixed_batch_matches_merged_models(setup) -> None:
    engine, merged, _ = setup
    prompts = [engine.tokenizer.encode(t) for t in TEXTS]
    # Every prompt under every adapter and none, all in one batch, interleaved; rows of different lengths.
    calls = [(p, adapter) for p in prompts for adapter in ("a", None, "b")]
    batches = engine.stats["batches"]

    async def main():
        return await asyncio.gather(*(engine.generate(p, GREEDY, adapter=ad) for p, ad in calls))

    outs = asyncio.run(main())
    assert engine.stats["batches"] == batches + 1  # one decode batch mixed all three
    by_adapter: dict[str | None, list[list[int]]] = {}
    for (prompt, adapter), (c,) in zip(calls, outs):
        tokens, logprobs = _reference(merged[adapter], prompt, GREEDY.max_tokens)
        assert c.completion_ids[: len(tokens)] == tokens[: len(c.completion_ids)], (adapter, prompt)
        n = len(c.completion_ids)
        assert torch.allclose(torch.tensor(c.logprobs), torch.tensor(logprobs[:n]), atol=LOGPROB_ATOL, rtol=0)
        assert c.weight_version == 3
        by_adapter.setdefault(adapter, []).append(c.completion_ids)
    # The adapters change what the model says (otherwise the comparison would prove nothing).
    assert by_adapter["a"] != by_adapter[None] and by_adapter["b"] != by_adapter[None]
    assert by_adapter["a"] != by_adapter["b"]


def test_rows_of_other_adapters_join_a_running_batch(setup) -> None:
    """Continuous batching: rows of adapter a and b join a base row mid-decode (their slots merged with the
    batch's) and still sample exactly what their merged model gives them alone."""
    engine, merged, _ = setup
    long_prompt, prompt = engine.tokenizer.encode(TEXTS[1]), engine.tokenizer.encode(TEXTS[0])
    joins = engine.stats["joins"]

    async def main():
        running = asyncio.ensure_future(
            engine.generate(long_prompt, SamplingParams(temperature=0.0, max_tokens=200, ignore_eos=True))
        )
        start = engine.stats["generated_tokens"]
        while engine.stats["generated_tokens"] - start < 3:  # the base row is mid-decode
            await asyncio.sleep(0.001)
        joined = await asyncio.gather(*(engine.generate(prompt, GREEDY, adapter=ad) for ad in ("a", "b")))
        await running
        return joined

    (row_a,), (row_b,) = asyncio.run(main())
    assert engine.stats["joins"] > joins
    for adapter, c in (("a", row_a), ("b", row_b)):
        tokens, logprobs = _reference(merged[adapter], prompt, GREEDY.max_tokens)
        assert c.completion_ids == tokens
        assert torch.allclose(torch.tensor(c.logprobs), torch.tensor(logprobs), atol=LOGPROB_ATOL, rtol=0)


def test_later_load_replaces_only_the_named_adapter(setup) -> None:
    engine, _, tensors = setup
    prompt = engine.tokenizer.encode(TEXTS[1])
    (before_b,) = engine.generate_sync(prompt, GREEDY, adapter="b")
    zero_a = {m: (a, torch.zeros_like(b)) for m, (a, b) in tensors["a"].items()}
    try:
        engine.load_adapters({"a": zero_a}, scaling=ALPHA / RANK, version=4)
        (a_now,) = engine.generate_sync(prompt, GREEDY, adapter="a")
        (base,) = engine.generate_sync(prompt, GREEDY)
        (b_now,) = engine.generate_sync(prompt, GREEDY, adapter="b")
        assert a_now.completion_ids == base.completion_ids  # a is now a zero delta
        assert b_now.completion_ids == before_b.completion_ids and b_now.weight_version == 4
        assert engine.adapter_names == ["a", "b"]
    finally:
        engine.load_adapters({"a": tensors["a"]}, scaling=ALPHA / RANK, version=5)


def test_unknown_adapter_and_mixing_are_refused(setup, tiny_model_dir: Path) -> None:
    engine, _, tensors = setup
    with pytest.raises(ValueError, match=r"unknown adapter 'c': the engine has loaded a, b"):
        engine.generate_sync([1, 2, 3], GREEDY, adapter="c")
    with pytest.raises(WeightSyncError, match="serves LoRA adapters"):
        engine.load_weights([])
    with pytest.raises(ValueError, match="no module 'model.nope'"):
        engine.load_adapters(
            {"c": {"model.nope": tensors["a"]["model.layers.0.self_attn.q_proj"]}}, scaling=1, version=9
        )
    assert engine.adapter_names == ["a", "b"]
    plain = LocalEngine.from_pretrained(str(tiny_model_dir), device="cpu", dtype="float32")
    with pytest.raises(ValueError, match="has loaded none"):
        plain.generate_sync([1, 2, 3], GREEDY, adapter="a")
    plain.load_weights([], version=1)
    with pytest.raises(WeightSyncError, match="serves merged weights"):
        plain.load_adapters(tensors, scaling=1.0, version=2)


def test_gateway_routes_a_model_name_to_its_adapter(setup, tmp_path: Path) -> None:
    """Two hops, both real gateways: a front gateway over an HTTP upstream whose adapter map names the
    worker's adapters (as the vLLM pool's policy names ``{adapter}-v{version}``), and a worker gateway over
    the engine, which reads ``model="w:<adapter>"``. Each call samples with the adapter its model names."""
    engine, _, _ = setup
    prompt = engine.tokenizer.encode(TEXTS[0])
    direct = {ad: engine.generate_sync(prompt, GREEDY, adapter=ad)[0] for ad in ("a", "b", None)}
    store, front_store = TraceStore(tmp_path / "w.db"), TraceStore(tmp_path / "front.db")
    with GatewayServer(create_app(engine, store, model_name="w")) as worker:
        upstream = HTTPUpstream([worker.url], kind="vllm", model="w", health_interval_s=60)
        with GatewayServer(create_app(upstream, front_store, model_name="policy")) as front:
            policy = {"weight_version": 3, "adapters": {"a": "w:a", "b": "w:b"}}
            assert (
                httpx.post(f"{front.url}/admin/policy", json=policy).json()["adapters"] == policy["adapters"]
            )
            for adapter, model in (("a", "policy:a"), ("b", "policy:b"), (None, "policy")):
                r = _complete(front.url, model, prompt)
                assert r.status_code == 200, r.text
                assert r.json()["choices"][0]["token_ids"] == direct[adapter].completion_ids, adapter
            unknown = _complete(front.url, "policy:c", prompt)
            assert unknown.status_code == 400
            assert "unknown adapter 'c': the servers have loaded a, b" in unknown.json()["error"]["message"]
        on_worker = _complete(worker.url, "w:c", prompt)
        assert on_worker.status_code == 400
        assert "unknown adapter 'c': the engine has loaded a, b" in on_worker.json()["error"]["message"]
    store.close()
    front_store.close()


def _complete(url: str, model: str, prompt: list[int]) -> httpx.Response:
    body = {"model": model, "prompt": prompt, "max_tokens": 8, "temperature": 0, "return_token_ids": True}
    return httpx.post(f"{url}/v1/completions", json=body, timeout=60)


def test_an_engine_without_the_capability_refuses_an_adapter() -> None:
    class OnePolicy(EngineBase):
        capabilities = EngineCapabilities(name="one", weight_transfer="tensors")

    OnePolicy().check_adapter(None)
    with pytest.raises(ValueError, match=r"serves one policy \(capabilities.adapters is false\)"):
        OnePolicy().check_adapter("solver")


def test_a_sync_mid_decode_resumes_each_row_with_its_adapter(setup) -> None:
    """load_adapters pauses a running batch like load_weights: here adapter a becomes b's tensors mid-decode.
    The a-row's early tokens are merged-a's, its later ones merged-b's; the b-row is merged-b's throughout."""
    engine, merged, tensors = setup
    params = SamplingParams(temperature=0.0, max_tokens=60, ignore_eos=True)
    prompt = engine.tokenizer.encode(TEXTS[0])
    start = engine.stats["generated_tokens"]

    def swap_when_decoding() -> None:
        while engine.stats["generated_tokens"] < start + 20:
            time.sleep(0.002)
        engine.load_adapters({"a": tensors["b"]}, scaling=ALPHA / RANK, version=8)

    async def main():
        return await asyncio.gather(*(engine.generate(prompt, params, adapter=ad) for ad in ("a", "b")))

    t = threading.Thread(target=swap_when_decoding)
    t.start()
    try:
        (row_a,), (row_b,) = asyncio.run(main())
    finally:
        t.join()
        engine.load_adapters({"a": tensors["a"]}, scaling=ALPHA / RANK, version=9)
    assert (row_a.pauses, row_a.last_weight_version) == (1, 8) and row_b.pauses == 1

    def under(model: torch.nn.Module, c) -> torch.Tensor:  # type: ignore[no-untyped-def]
        with torch.no_grad():
            logits = model(torch.tensor([c.prompt_ids + c.completion_ids])).logits[0, len(prompt) - 1 : -1]
        lp = torch.log_softmax(logits.float(), -1)
        return lp.gather(-1, torch.tensor(c.completion_ids)[:, None])[:, 0]

    assert torch.allclose(torch.tensor(row_b.logprobs), under(merged["b"], row_b), atol=LOGPROB_ATOL)
    got = torch.tensor(row_a.logprobs)
    old_ok = torch.isclose(got, under(merged["a"], row_a), atol=LOGPROB_ATOL, rtol=0)
    new_ok = torch.isclose(got, under(merged["b"], row_a), atol=LOGPROB_ATOL, rtol=0)
    k = int(old_ok.long().argmin())  # the first token not sampled with the old adapter a
    assert 0 < k < len(got) and bool(old_ok[:k].all()) and bool(new_ok[k:].all())
