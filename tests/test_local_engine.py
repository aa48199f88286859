"""The local inference engine on the tiny model: batched KV-cache decoding must equal Hugging Face's
own generate token for token, report the logprobs a full forward pass gives, and keep serving."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from rllm.inference.base import Completion, SamplingParams
from rllm.inference.local import LocalEngine

GREEDY = SamplingParams(temperature=0.0, max_tokens=10)
TEXTS = [
    "Hello there, how are",
    "The capital of France is the city of",
    "1 2 3",
    "What",
    "A much longer prompt than the others, so that the batch has a lot of left padding in it",
]


@pytest.fixture(scope="module")
def hf_model(tiny_model_dir: Path) -> torch.nn.Module:
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def engine(tiny_model_dir: Path) -> LocalEngine:
    return LocalEngine.from_pretrained(str(tiny_model_dir), device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def prompts(engine: LocalEngine) -> list[list[int]]:
    return [engine.tokenizer.encode(t) for t in TEXTS]


def _gather(engine: LocalEngine, calls: list[tuple[list[int], SamplingParams]]) -> list[list[Completion]]:
    async def main() -> list[list[Completion]]:
        return list(await asyncio.gather(*(engine.generate(p, sp) for p, sp in calls)))

    return asyncio.run(main())


@torch.no_grad()
def _hf_greedy(model: torch.nn.Module, prompt: list[int], max_new: int) -> list[int]:
    ids = torch.tensor([prompt])
    out = model.generate(
        ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=max_new, pad_token_id=2
    )
    return out[0, len(prompt) :].tolist()


@torch.no_grad()
def _recomputed_logprobs(model: torch.nn.Module, c: Completion, temperature: float) -> torch.Tensor:
    ids = torch.tensor([c.prompt_ids + c.completion_ids])
    logits = model(ids).logits[0, len(c.prompt_ids) - 1 : -1] / temperature
    return torch.log_softmax(logits.float(), dim=-1).gather(1, torch.tensor(c.completion_ids)[:, None])[:, 0]


def test_batched_greedy_equals_hf_generate(engine, hf_model, prompts) -> None:
    # Different prompt lengths (left padding, position ids) and different max_tokens (rows leave the
    # batch and the KV cache is pruned while the others go on), all in one batch.
    max_tokens = [10, 3, 7, 10, 1]
    batches_before = engine.stats["batches"]
    outs = _gather(
        engine, [(p, GREEDY.model_copy(update={"max_tokens": m})) for p, m in zip(prompts, max_tokens)]
    )
    assert engine.stats["batches"] == batches_before + 1
    for prompt, m, (c,) in zip(prompts, max_tokens, outs):
        assert c.prompt_ids == prompt
        assert c.completion_ids == _hf_greedy(hf_model, prompt, m)
    assert len({tuple(c.completion_ids) for (c,) in outs}) == len(outs)  # the model is not degenerate


def test_logprobs_match_full_forward(engine, hf_model, prompts) -> None:
    greedy = GREEDY
    sampled = SamplingParams(temperature=0.8, max_tokens=8, seed=3)
    filtered = SamplingParams(temperature=1.3, top_k=20, top_p=0.9, max_tokens=8, seed=4)
    calls = [(p, greedy) for p in prompts[:2]] + [(p, sampled) for p in prompts] + [(prompts[2], filtered)]
    for (_, sp), (c,) in zip(calls, _gather(engine, calls)):
        assert len(c.logprobs) == len(c.completion_ids)
        expected = _recomputed_logprobs(hf_model, c, sp.temperature or 1.0)
        assert torch.allclose(torch.tensor(c.logprobs), expected, atol=1e-4, rtol=0), (sp, c)


def test_max_tokens_gives_finish_reason_length(engine, prompts) -> None:
    (c,) = engine.generate_sync(prompts[0], SamplingParams(temperature=1.0, max_tokens=4, seed=0))
    assert len(c.completion_ids) == 4 and len(c.logprobs) == 4
    assert c.finish_reason == "length"
    assert c.text == engine.tokenizer.decode(c.completion_ids, skip_special_tokens=True)


def test_eos_stops_and_is_kept(engine, prompts) -> None:
    (full,) = engine.generate_sync(prompts[1], GREEDY)
    eos_ids = engine.eos_ids
    engine.eos_ids = [full.completion_ids[3]]  # pretend the 4th greedy token is the eos token
    try:
        (c,) = engine.generate_sync(prompts[1], GREEDY)
    finally:
        engine.eos_ids = eos_ids
    first = full.completion_ids.index(full.completion_ids[3])
    assert c.completion_ids == full.completion_ids[: first + 1]
    assert c.finish_reason == "stop"


def test_stop_token_ids_stop_and_are_kept(engine, prompts) -> None:
    (full,) = engine.generate_sync(prompts[1], GREEDY)
    stop = full.completion_ids[3]
    (c,) = engine.generate_sync(prompts[1], GREEDY.model_copy(update={"stop_token_ids": [stop]}))
    first = full.completion_ids.index(stop)
    assert c.completion_ids == full.completion_ids[: first + 1]
    assert c.finish_reason == "stop"


def test_stop_string_cuts_text_but_keeps_tokens(engine, prompts) -> None:
    (full,) = engine.generate_sync(prompts[0], GREEDY)
    tok = engine.tokenizer
    ids = full.completion_ids

    def text(k: int) -> str:
        return tok.decode(ids[:k], skip_special_tokens=True)

    # The stop string: the text of the first token (after the first) that completes something new.
    k, piece = next(
        (k, p)
        for k in range(1, len(ids))
        if (p := tok.decode(ids[k : k + 1]).strip()) and all(p not in text(j) for j in range(k + 1))
    )
    (c,) = engine.generate_sync(prompts[0], GREEDY.model_copy(update={"stop": ["never-seen-xyz", piece]}))
    assert c.finish_reason == "stop"
    assert c.completion_ids == ids[: k + 1]  # the token that completed the stop string stays
    assert len(c.logprobs) == k + 1
    assert c.text == text(k + 1)[: text(k + 1).index(piece)]
    assert piece not in c.text


def test_n_gives_n_distinct_completions(engine, prompts) -> None:
    outs = engine.generate_sync(prompts[3], SamplingParams(temperature=1.0, max_tokens=6, n=4, seed=11))
    assert len(outs) == 4
    assert len({tuple(c.completion_ids) for c in outs}) == 4
    assert all(len(c.completion_ids) == 6 and c.prompt_ids == prompts[3] for c in outs)


def test_same_seed_same_output_different_seed_different(engine, prompts) -> None:
    def run(seed: int) -> list[int]:
        return engine.generate_sync(prompts[0], SamplingParams(temperature=1.0, max_tokens=8, seed=seed))[
            0
        ].completion_ids

    assert run(5) == run(5)
    assert run(5) != run(6)
    # A seeded row draws the same tokens whatever else shares its batch.
    sp = SamplingParams(temperature=1.0, max_tokens=8, seed=5)
    together = _gather(engine, [(prompts[1], sp), (prompts[0], sp), (prompts[4], sp)])
    assert together[1][0].completion_ids == run(5)


def test_concurrent_requests_are_batched(engine, prompts) -> None:
    before = dict(engine.stats)
    calls = [(p, SamplingParams(temperature=1.0, max_tokens=3, seed=i)) for i, p in enumerate(prompts * 4)]
    outs = _gather(engine, calls)
    assert len(outs) == 20 and all(len(o) == 1 for o in outs)
    batches = engine.stats["batches"] - before["batches"]
    assert 1 <= batches < len(calls)
    assert engine.stats["rows"] - before["rows"] == len(calls)


def test_load_weights_bumps_version_and_changes_output(tiny_model_dir, prompts) -> None:
    engine = LocalEngine.from_pretrained(str(tiny_model_dir), device="cpu", dtype="float32")
    (before,) = engine.generate_sync(prompts[1], GREEDY)
    assert before.weight_version == 0
    gen = torch.Generator().manual_seed(0)
    new = [
        (name, p.detach() + 0.5 * torch.randn(p.shape, generator=gen))
        for name, p in engine.model.named_parameters()
        if "layers.0" in name and p.dim() == 2
    ]
    engine.load_weights(new)
    assert engine.weight_version == 1
    (after,) = engine.generate_sync(prompts[1], GREEDY)
    assert after.weight_version == 1
    assert after.completion_ids != before.completion_ids
    engine.load_weights([], version=7)
    assert engine.weight_version == 7
    with pytest.raises(KeyError, match="no parameter"):
        engine.load_weights([("not.a.weight", torch.zeros(1))])


def test_failed_batch_fails_its_requests_and_engine_keeps_serving(engine, prompts) -> None:
    vocab = engine.model.config.vocab_size
    bad = [5, vocab + 10]  # an out-of-vocab id makes the embedding lookup raise inside the batch

    async def main() -> list:
        return list(
            await asyncio.gather(
                engine.generate(bad, GREEDY), engine.generate(prompts[0], GREEDY), return_exceptions=True
            )
        )

    results = asyncio.run(main())
    assert all(isinstance(r, Exception) for r in results)  # both shared the failed batch
    (c,) = engine.generate_sync(prompts[0], GREEDY)  # a new loop, a new worker
    assert c.finish_reason == "length"

    async def same_loop() -> tuple:
        with pytest.raises(IndexError):
            await engine.generate(bad, GREEDY)
        return await engine.generate(prompts[0], GREEDY)  # the same worker goes on

    (again,) = asyncio.run(same_loop())
    assert again.completion_ids == c.completion_ids
    with pytest.raises(ValueError, match="at least one prompt token"):
        engine.generate_sync([], GREEDY)


def test_cancelled_request_is_not_decoded(engine, prompts) -> None:
    async def main() -> list[Completion]:
        doomed = asyncio.ensure_future(engine.generate(prompts[4], GREEDY))
        await asyncio.sleep(0)  # its rows are queued
        doomed.cancel()  # e.g. its episode timed out
        return await engine.generate(prompts[0], GREEDY)

    rows_before = engine.stats["rows"]
    (c,) = asyncio.run(main())
    assert c.finish_reason == "length"
    assert engine.stats["rows"] - rows_before == 1


def test_rows_of_one_prompt_share_their_prefill(engine, hf_model, prompts) -> None:
    """A group's completions of one prompt arrive together (GRPO): the prompt is prefilled once and its KV
    cache copied to each row, and every row still gives what it gives alone (greedy: HF's tokens; seeded:
    the same draw; logprobs: the full forward's)."""
    seeded = [SamplingParams(temperature=1.0, max_tokens=6, seed=20 + i) for i in range(3)]
    calls = [(prompts[1], sp) for sp in seeded] + [(prompts[1], GREEDY), (prompts[4], GREEDY)]
    before = engine.stats["shared_prefill_rows"]
    outs = _gather(engine, calls)
    assert engine.stats["shared_prefill_rows"] - before == 3  # 4 rows of prompts[1], 1 prefilled
    assert outs[3][0].completion_ids == _hf_greedy(hf_model, prompts[1], 10)
    assert outs[4][0].completion_ids == _hf_greedy(hf_model, prompts[4], 10)
    for sp, (c,) in zip(seeded, outs):
        assert c.completion_ids == engine.generate_sync(prompts[1], sp)[0].completion_ids
        assert torch.allclose(
            torch.tensor(c.logprobs), _recomputed_logprobs(hf_model, c, 1.0), atol=1e-4, rtol=0
        )
    assert len({tuple(c.completion_ids) for (c,) in outs[:3]}) == 3
