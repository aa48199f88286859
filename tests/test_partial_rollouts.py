"""Partial rollouts on the local engine: a weight sync that lands mid-decode pauses the running batch, swaps
the weights, and resumes every unfinished row from its prefix under the new weights. Each token keeps the
logprob its own weights gave it; the completion records the versions of its first and last token."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from rllm.inference.base import Completion, SamplingParams
from rllm.inference.local import LocalEngine


@pytest.fixture
def engine(tiny_model_dir: Path) -> LocalEngine:
    return LocalEngine.from_pretrained(str(tiny_model_dir), device="cpu", dtype="float32")


def _perturbed(engine: LocalEngine, scale: float) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(7)
    return {
        n: p.detach().clone() + scale * torch.randn(p.shape, generator=gen)
        for n, p in engine.model.named_parameters()
    }


@torch.no_grad()
def _logprobs_under(model: torch.nn.Module, c: Completion, temperature: float) -> torch.Tensor:
    ids = torch.tensor([c.prompt_ids + c.completion_ids])
    logits = model(ids).logits[0, len(c.prompt_ids) - 1 : -1].float() / temperature
    lp = torch.log_softmax(logits, -1)
    return lp.gather(-1, torch.tensor(c.completion_ids).unsqueeze(-1)).squeeze(-1)


def test_a_sync_mid_decode_pauses_swaps_and_resumes(engine: LocalEngine, tiny_model_dir: Path) -> None:
    old_model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    new_weights = _perturbed(engine, 0.05)
    params = SamplingParams(temperature=1.0, max_tokens=400, ignore_eos=True, seed=3)
    prompts = [engine.tokenizer.encode(t) for t in ("Once upon a time", "1 2 3 4", "The weather")]
    swapped: dict[str, float] = {}

    def swap_when_decoding() -> None:
        while engine.stats["generated_tokens"] < 30:  # the batch is decoding
            time.sleep(0.002)
        t0 = time.perf_counter()
        engine.load_weights(new_weights.items(), version=5)
        swapped["wait_s"] = time.perf_counter() - t0
        swapped["tokens_at_swap"] = engine.stats["generated_tokens"]

    async def main() -> list[list[Completion]]:
        return list(await asyncio.gather(*(engine.generate(p, params) for p in prompts)))

    t = threading.Thread(target=swap_when_decoding)
    t.start()
    results = [r[0] for r in asyncio.run(main())]
    t.join()
    assert swapped["wait_s"] < 2.0  # it waited for one decode step, not for the 400-token batch
    for c in results:
        assert len(c.completion_ids) == 400 and c.finish_reason == "length"
        assert (c.weight_version, c.last_weight_version, c.pauses) == (0, 5, 1)
    # Every token's logprob is its own weights': the early ones the old model's, the late ones the new one's.
    new_model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    new_model.load_state_dict(new_weights, strict=False)  # lm_head is tied
    for c in results:
        got = torch.tensor(c.logprobs)
        under_old, under_new = _logprobs_under(old_model, c, 1.0), _logprobs_under(new_model, c, 1.0)
        old_ok = torch.isclose(got, under_old, atol=1e-3)
        new_ok = torch.isclose(got, under_new, atol=1e-3)
        k = int(old_ok.long().argmin())  # the first token not sampled under the old weights
        assert k > 0 and bool(old_ok[:k].all()) and bool(new_ok[k:].all())
        assert not bool(new_ok[: k - 1].all())  # the two models do differ on the prefix


def test_a_call_with_no_sync_is_not_paused(engine: LocalEngine) -> None:
    c = engine.generate_sync(engine.tokenizer.encode("Hello"), SamplingParams(max_tokens=8, seed=1))[0]
    assert (c.weight_version, c.last_weight_version, c.pauses) == (0, 0, 0)


def test_behind_the_gateway_the_trace_and_step_record_both_versions(
    engine: LocalEngine, tmp_path: Path
) -> None:
    """The path no peer has: an agent's HTTP call through the gateway is paused by a sync like any other; its
    trace records the versions of its first and last token, and the step assembled from it keeps the oldest
    (what staleness is measured from) with the newest in its info."""
    import openai

    from rllm.gateway.app import create_app
    from rllm.gateway.server import GatewayServer
    from rllm.gateway.traces import TraceStore
    from rllm.gateway.upstreams import LocalUpstream
    from rllm.runner.assembly import assemble_steps

    store = TraceStore(tmp_path / "traces.db")
    server = GatewayServer(create_app(LocalUpstream(engine), store, model_name="tiny")).start()
    new_weights = _perturbed(engine, 0.05)
    try:
        t = threading.Thread(
            target=lambda: (
                _wait_for_tokens(engine, 30),
                engine.load_weights(new_weights.items(), version=2),
            )
        )
        t.start()
        client = openai.OpenAI(base_url=f"{server.url}/sessions/s1/v1", api_key="x", max_retries=0)
        client.completions.create(
            model="tiny", prompt="Once upon a time", max_tokens=300, extra_body={"ignore_eos": True}
        )
        t.join()
        (trace,) = store.list("s1")
        assert (trace.weight_version, trace.last_weight_version) == (0, 2)
        steps, _ = assemble_steps([trace])
        assert steps[0].weight_version == 0 and steps[0].info["last_weight_version"] == 2
    finally:
        server.stop()
        store.close()


def _wait_for_tokens(engine: LocalEngine, n: int) -> None:
    start = engine.stats["generated_tokens"]
    while engine.stats["generated_tokens"] - start < n:
        time.sleep(0.002)
