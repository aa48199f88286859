"""Grammar-constrained decoding with llguidance: a row's output must match a grammar (a JSON schema, a
Lark grammar, tool calls whose arguments match their schemas).

A :class:`Grammar` is what a request asks for: llguidance grammar text, checked against the model's
vocabulary when it is made (a grammar llguidance cannot compile is a :class:`GrammarError` naming why).
The engine starts one :class:`GrammarMatcher` per row (``Grammar.start``): the matcher's state is that
row's position in the grammar, advanced by every token the row samples.

Before each sampled token the matcher says which tokens may come next:

- When the grammar fixes the next text (``compute_ff_tokens``: a literal such as ``{"name": "``), only the
  first token of how the tokenizer writes it is allowed, so forced text comes out tokenized canonically.
- Otherwise llguidance's token mask (computed in Rust) allows every token that keeps the text inside the
  grammar; once the grammar is complete its end-of-sequence token is among them, and once nothing may
  follow it is the only one (so a finished grammar forces the eos, which ends the row).

Each token records how many tokens the grammar allowed at its position (``Completion.allowed_counts``):
``1`` means the grammar forced it (the model had no choice; the gateway masks it out of training, logprob
0.0), more means the model chose. **The logprob recorded for a constrained token that was sampled is the
unrestricted one**, under ``log_softmax(logits / temperature)`` over the full vocabulary, as for top-k /
top-p: the distribution the trainer recomputes from the same logits, never the one renormalised over the
allowed tokens (``tests/test_grammar.py`` checks the parity with a plain forward pass).

The tokenizer wrapper llguidance needs is built once per tokenizer (it takes a fraction of a second) and
shared by every grammar of that tokenizer.
"""

from __future__ import annotations

import json
import threading
import weakref
from collections.abc import Mapping
from typing import Any

import llguidance
import llguidance.numpy
import numpy as np

# Canonical JSON, as json.dumps writes it (and as rllm renders tool calls): ", " and ": " separators, no
# other whitespace. Flexible whitespace would let a weak model spend its tokens on blanks.
JSON_LAYOUT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


class GrammarError(ValueError):
    """A grammar (or JSON schema) llguidance cannot compile; the message says what is wrong with it."""


_vocabularies: weakref.WeakKeyDictionary[Any, llguidance.LLTokenizer] = weakref.WeakKeyDictionary()
_vocabularies_lock = threading.Lock()


def grammar_vocabulary(tokenizer: Any) -> llguidance.LLTokenizer:
    """llguidance's view of a Hugging Face (fast) tokenizer, built on first use and kept while the
    tokenizer lives. Its end-of-sequence token is the tokenizer's eos (which the engines stop on)."""
    with _vocabularies_lock:
        vocab = _vocabularies.get(tokenizer)
        if vocab is None:
            # Here, not at the top: llguidance.hf imports transformers, which the gateway's import (and
            # `import rllm.eval`) would otherwise pay for without ever building a grammar.
            import llguidance.hf

            try:
                vocab = llguidance.hf.from_tokenizer(tokenizer)
            except ValueError as exc:
                raise GrammarError(
                    f"constrained decoding needs a fast Hugging Face tokenizer: {exc}"
                ) from exc
            _vocabularies[tokenizer] = vocab
        return vocab


def json_schema_grammar(schema: Mapping[str, Any]) -> str:
    """llguidance grammar text for JSON matching ``schema``, laid out canonically (``JSON_LAYOUT``)."""
    return llguidance.LLMatcher.grammar_from_json_schema(dict(schema), overrides=JSON_LAYOUT)  # type: ignore[arg-type]


def lark_json(schema: Mapping[str, Any]) -> str:
    """A Lark expression for JSON matching ``schema`` (llguidance's ``%json``), laid out canonically."""
    return "%json " + json.dumps({**schema, "x-guidance": JSON_LAYOUT}, ensure_ascii=False)


class Grammar:
    """What a request's output must match: llguidance grammar text (``LLMatcher.grammar_from_*``; Lark
    text is accepted too), validated against ``tokenizer``'s vocabulary here, so a bad grammar fails the
    request before it is queued. The engine calls :meth:`start` once per row."""

    def __init__(self, grammar: str, tokenizer: Any) -> None:
        self.vocab = grammar_vocabulary(tokenizer)
        if not grammar.lstrip().startswith("{"):
            grammar = llguidance.LLMatcher.grammar_from_lark(grammar)
        error = llguidance.LLMatcher.validate_grammar(grammar, self.vocab)
        if error:
            raise GrammarError(error)
        # Compiled once here; each row starts from a copy (cheaper than compiling again per row).
        self._start = llguidance.LLMatcher(self.vocab, grammar, log_level=0)
        if self._start.is_error():
            raise GrammarError(self._start.get_error())

    @classmethod
    def from_json_schema(cls, schema: Mapping[str, Any], tokenizer: Any) -> Grammar:
        """JSON matching ``schema`` (``{"type": "object"}``: any JSON object), then the end of sequence."""
        try:
            return cls(json_schema_grammar(schema), tokenizer)
        except ValueError as exc:  # llguidance's own errors (not valid JSON ...) as GrammarError
            raise GrammarError(str(exc)) from exc

    def start(self) -> GrammarMatcher:
        """A fresh matcher for one row, at the grammar's start."""
        return GrammarMatcher(self)

    def replay(self, token_ids: list[int], vocab_size: int) -> list[int]:
        """The per-token ``allowed_counts`` the engine would have recorded sampling ``token_ids`` under this
        grammar (1: forced); a ``ValueError`` when the grammar refuses one of them."""
        matcher = self.start()
        for i, token in enumerate(token_ids):
            if not matcher.allowed(vocab_size)[token]:
                raise ValueError(f"the grammar refuses token {token} at position {i}")
            matcher.advance(token)
        return matcher.allowed_counts


class GrammarMatcher:
    """One row's position in a :class:`Grammar`. The engine asks :meth:`allowed` before each token and
    hands the token it picked to :meth:`advance`; ``allowed_counts`` keeps, per token, how many tokens the
    grammar allowed there (1: forced)."""

    def __init__(self, grammar: Grammar) -> None:
        self.vocab = grammar.vocab
        self.matcher = grammar._start.deep_copy()
        self.eos = set(grammar.vocab.eos_tokens)
        self.allowed_counts: list[int] = []
        self._count = 0  # what the last allowed() call allowed, recorded by advance()
        self._bitmask = llguidance.numpy.allocate_token_bitmask(1, grammar.vocab.vocab_size)

    def allowed(self, vocab_size: int) -> np.ndarray:
        """The ``[vocab_size]`` bool mask of the tokens that may come next (never empty)."""
        mask = np.zeros(vocab_size, dtype=bool)
        forced = self.matcher.compute_ff_tokens()
        if forced:
            mask[forced[0]] = True
            self._count = 1
            return mask
        llguidance.numpy.fill_next_token_bitmask(self.matcher, self._bitmask)
        if self.matcher.is_error():
            raise RuntimeError(f"the grammar cannot go on: {self.matcher.get_error()}")
        # Bit i of the mask's little-endian int32 word w is token 32 * w + i.
        bits = np.unpackbits(self._bitmask.view(np.uint8), bitorder="little")
        n = min(vocab_size, self.vocab.vocab_size)
        mask[:n] = bits[:n]
        self._count = int(mask.sum())
        if self._count == 0:
            raise RuntimeError("the grammar allows no token of this model's vocabulary here")
        return mask

    def advance(self, token: int) -> bool:
        """Take the token the row sampled (one :meth:`allowed` allowed); True once the grammar is complete
        and ended with its end-of-sequence token: the row is done."""
        self.allowed_counts.append(self._count)
        if not self.matcher.consume_token(token):
            raise RuntimeError(f"the grammar refused token {token}: {self.matcher.get_error()}")
        return token in self.eos and self.matcher.is_stopped()
