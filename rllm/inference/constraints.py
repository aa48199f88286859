"""Token constraints for constrained decoding: which tokens a row may sample next.

A constraint is asked, before each sampled token, which token ids may follow the completion so far; the
engine masks every other token out of the sampling distribution (the logprob it records stays the one
under the unrestricted ``logits / temperature``, as for top-k / top-p). ``None`` means "free from here":
the engine stops asking. Constraints are stateless (a function of the completion ids), so one serves all
rows of a request and the gateway can recompute afterwards how many tokens each position allowed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol


class TokenConstraint(Protocol):
    def allowed(self, completion_ids: Sequence[int]) -> list[int] | None:
        """The token ids that may come after ``completion_ids`` (never empty), or ``None`` once the
        completion has left the constrained part (every token is allowed from then on)."""
        ...


class OneOfTexts:
    """The completion starts with exactly one of ``choices`` (texts), then goes on freely.

    At each step the allowed tokens are, for every choice the text so far is a prefix of, the first token
    of how the tokenizer writes the rest of that choice: so the model picks between the choices where they
    differ, and a choice's remaining text is forced (one allowed token) once it is the only one left.
    The tokens spell every choice the way the tokenizer splits it, so a choice that begins at a token
    boundary comes out tokenized as the whole text would be.
    """

    def __init__(self, tokenizer: Any, choices: Sequence[str]) -> None:
        choices = list(dict.fromkeys(choices))
        if not choices or any(not c for c in choices):
            raise ValueError(f"OneOfTexts needs at least one choice and no empty one, got {choices!r}")
        self.tokenizer = tokenizer
        self.choices = choices
        self._cache: dict[tuple[int, ...], list[int] | None] = {}

    def allowed(self, completion_ids: Sequence[int]) -> list[int] | None:
        key = tuple(completion_ids)
        if key not in self._cache:
            self._cache[key] = self._allowed(key)
        return self._cache[key]

    def _allowed(self, ids: tuple[int, ...]) -> list[int] | None:
        text = self.tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)
        rests = [c[len(text) :] for c in self.choices if c.startswith(text) and len(c) > len(text)]
        if not rests:  # a choice is complete (or, from a caller that did not follow us, none fits): free
            return None
        allowed: list[int] = []
        for rest in rests:
            first = self.tokenizer(rest, add_special_tokens=False)["input_ids"][0]
            piece = self.tokenizer.decode(
                [first], skip_special_tokens=False, clean_up_tokenization_spaces=False
            )
            if not piece or not rest.startswith(piece):
                raise ValueError(
                    f"this tokenizer does not write {rest!r} starting with a token of its own text (its first "
                    f"token decodes to {piece!r}), so it cannot be constrained to it"
                )
            if first not in allowed:
                allowed.append(first)
        return allowed


def allowed_counts(constraint: TokenConstraint, completion_ids: Sequence[int]) -> list[int]:
    """For each completion token, how many tokens ``constraint`` allowed at its position (0: unconstrained).
    Stops counting at the first token the constraint did not allow (it was not followed)."""
    counts: list[int] = []
    for i, token in enumerate(completion_ids):
        allowed = constraint.allowed(completion_ids[:i])
        if allowed is None or token not in allowed:
            break
        counts.append(len(allowed))
    return counts + [0] * (len(completion_ids) - len(counts))
