"""Grammar-constrained decoding on the local engine (rllm.inference.grammar, llguidance): every row matches
its grammar, each token says whether the grammar forced it, and the logprob recorded for a sampled
constrained token is the unrestricted one a plain forward pass gives (what the trainer recomputes)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from rllm.inference.base import SamplingParams
from rllm.inference.grammar import Grammar, GrammarError
from rllm.inference.local import LocalEngine
from rllm.inference.sampling import sample_tokens

SCHEMA = {
    "type": "object",
    "properties": {
        "a": {"type": "integer", "minimum": 0, "maximum": 999},
        "b": {"type": "string", "maxLength": 6},
        "c": {"type": "boolean"},
    },
    "required": ["a", "b", "c"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def engine(tiny_model_dir: Path) -> LocalEngine:
    return LocalEngine.from_pretrained(str(tiny_model_dir), device="cpu", dtype="float32")


def _valid(value: object) -> bool:
    """SCHEMA checked by hand (the jsonschema package is not a dependency)."""
    return (
        isinstance(value, dict)
        and set(value) == {"a", "b", "c"}
        and type(value["a"]) is int
        and 0 <= value["a"] <= 999
        and isinstance(value["b"], str)
        and len(value["b"]) <= 6
        and isinstance(value["c"], bool)
    )


def test_every_row_matches_the_schema_and_ends_with_a_forced_eos(engine: LocalEngine) -> None:
    tokenizer = engine.tokenizer
    grammar = Grammar.from_json_schema(SCHEMA, tokenizer)
    prompt = tokenizer("Reply in JSON:", add_special_tokens=False)["input_ids"]
    params = SamplingParams(temperature=1.0, max_tokens=60, n=16, seed=3)
    completions = asyncio.run(engine.generate(prompt, params, constraint=grammar))
    valid = 0
    for c in completions:
        assert c.finish_reason == "stop" and c.completion_ids[-1] == tokenizer.eos_token_id
        valid += _valid(json.loads(c.text))
        counts = c.allowed_counts
        assert counts is not None and len(counts) == len(c.completion_ids) and counts[-1] == 1
        assert counts[:4] == [1, 1, 1, 1]  # '{"', 'a', '":', ' ': fixed text, forced token by token
        assert any(n > 1 for n in counts)  # the values were chosen
    assert valid == 16
    # A greedy row is constrained too; an unconstrained call records no counts.
    (greedy,) = asyncio.run(
        engine.generate(prompt, SamplingParams(temperature=0.0, max_tokens=60), constraint=grammar)
    )
    assert _valid(json.loads(greedy.text))
    (free,) = asyncio.run(engine.generate(prompt, SamplingParams(max_tokens=4)))
    assert free.allowed_counts is None


def test_sampled_constrained_tokens_record_the_unrestricted_logprob(
    engine: LocalEngine, tiny_model_dir: Path
) -> None:
    """Parity: a plain forward pass over prompt + completion gives, at every token the model chose
    (the grammar allowed more than one), log_softmax(logits / T) of that token: the recorded logprob,
    within 1e-4 (float32 KV-cache decoding against one full forward pass)."""
    tokenizer = engine.tokenizer
    grammar = Grammar.from_json_schema(SCHEMA, tokenizer)
    prompt = tokenizer("Reply in JSON:", add_special_tokens=False)["input_ids"]
    temperature = 0.7
    params = SamplingParams(temperature=temperature, max_tokens=60, n=4, seed=11)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    checked = 0
    for c in asyncio.run(engine.generate(prompt, params, constraint=grammar)):
        ids = torch.tensor([prompt + c.completion_ids])
        with torch.no_grad():
            logits = model(ids).logits[0, len(prompt) - 1 : -1]
        expected = torch.log_softmax(logits / temperature, dim=-1).gather(
            1, torch.tensor(c.completion_ids).unsqueeze(1)
        )[:, 0]
        assert c.allowed_counts is not None
        chosen = [i for i, n in enumerate(c.allowed_counts) if n > 1]
        recorded = torch.tensor(c.logprobs)
        assert torch.allclose(recorded[chosen], expected[chosen], atol=1e-4), (recorded, expected)
        # Not the logprob renormalised over the allowed tokens: that one is higher wherever the grammar cut.
        assert (expected[chosen] < -1e-3).any()
        checked += len(chosen)
    assert checked >= 20


def test_a_lark_grammar_with_a_free_tail(engine: LocalEngine) -> None:
    """Names that share prefixes, then free text: every row writes exactly one of them, and the shared
    prefix is forced while the choice between them is the model's."""
    tokenizer = engine.tokenizer
    grammar = Grammar('start: ("get" | "get_time" | "get_weather") "(" TEXT\nTEXT: /[a-z ]{0,8}/', tokenizer)
    prompt = tokenizer("Which tool? ", add_special_tokens=False)["input_ids"]
    params = SamplingParams(temperature=3.0, max_tokens=20, n=24, seed=5)
    seen = set()
    for c in asyncio.run(engine.generate(prompt, params, constraint=grammar)):
        name = c.text.split("(")[0]
        assert name in ("get", "get_time", "get_weather"), c.text
        seen.add(name)
        assert c.allowed_counts is not None and c.allowed_counts[0] == 1  # "get" is every name's start
    assert len(seen) >= 2


def test_a_grammar_llguidance_cannot_compile_is_refused(engine: LocalEngine) -> None:
    with pytest.raises(GrammarError):
        Grammar("start: undefined_rule", engine.tokenizer)
    with pytest.raises(GrammarError):
        Grammar.from_json_schema(
            {"type": "object", "properties": {"x": {"$ref": "#/nowhere"}}}, engine.tokenizer
        )


def test_sampling_under_a_mask_reports_the_unrestricted_logprob() -> None:
    torch.manual_seed(0)
    logits = torch.randn(3, 50)
    allowed = torch.zeros(3, 50, dtype=torch.bool)
    allowed[0, [3, 7]] = True
    allowed[1, 11] = True
    allowed[2] = True  # a free row
    gens = [torch.Generator().manual_seed(i) for i in range(3)]
    temperature = torch.tensor([1.0, 0.0, 0.5])
    # top_k 1 on row 0: among the allowed tokens (the mask goes first), so never an empty choice.
    tokens, lps = sample_tokens(logits, temperature, torch.tensor([1, 0, 0]), torch.ones(3), gens, allowed)
    assert int(tokens[0]) == (3 if logits[0, 3] > logits[0, 7] else 7) and int(tokens[1]) == 11
    expected = [
        torch.log_softmax(logits[0], -1)[tokens[0]],
        torch.log_softmax(logits[1], -1)[11],  # greedy: the raw logits' log-softmax, as unconstrained
        torch.log_softmax(logits[2] / 0.5, -1)[tokens[2]],
    ]
    assert torch.allclose(lps, torch.stack(expected))


def test_replay_gives_the_counts_sampling_recorded_and_refuses_what_the_grammar_does(
    engine: LocalEngine,
) -> None:
    grammar = Grammar('start: "Answer: " NUMBER\nNUMBER: /[0-9]{1,3}/\n', engine.tokenizer)
    (c,) = asyncio.run(
        engine.generate([1, 2, 3], SamplingParams(temperature=1.0, max_tokens=12, seed=1), constraint=grammar)
    )
    vocab = len(engine.tokenizer)
    assert grammar.replay(c.completion_ids, vocab) == c.allowed_counts
    words = engine.tokenizer("Answer: x", add_special_tokens=False)["input_ids"]
    with pytest.raises(ValueError, match=f"refuses token {words[-1]} at position {len(words) - 1}"):
        grammar.replay(words, vocab)
