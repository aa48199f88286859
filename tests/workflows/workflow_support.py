"""A scripted policy over the tiny model, for workflow tests that need the model to say particular things.

``ScriptedEngine`` answers each prompt with text the test chooses (``policy(prompt_text) -> reply``), yet
stays token-faithful: the reply is tokenized with the real tokenizer, ends with the eos token, and its
logprobs are the tiny model's own (one forward pass over prompt + reply). Only the choice of tokens is
scripted; everything a workflow, the assembly and the transforms see is what a real engine produces.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import torch

from rllm.inference.base import Completion, EngineBase, EngineCapabilities, SamplingParams
from rllm.inference.local import LocalEngine
from rllm.runner.workflow_runner import WorkflowRunner

FAKE_CAPABILITIES = EngineCapabilities(name="fake", weight_transfer="tensors", constraints=True)


class ScriptedEngine(EngineBase):
    """Replies chosen by ``policy``; token ids and logprobs from ``engine``'s tokenizer and model."""

    capabilities = FAKE_CAPABILITIES

    def __init__(self, engine: LocalEngine, policy: Callable[[str], str]) -> None:
        self.engine = engine
        self.policy = policy
        self.weight_version = 0
        self.prompts: list[str] = []

    @property
    def tokenizer(self) -> Any:
        return self.engine.tokenizer

    def apply_chat_template(
        self, messages: list[dict[str, Any]], tools: list[dict] | None = None
    ) -> list[int]:
        return self.engine.apply_chat_template(messages, tools=tools)

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, *, constraint: Any = None
    ) -> list[Completion]:
        tok = self.engine.tokenizer
        prompt = tok.decode(prompt_ids)
        self.prompts.append(prompt)
        reply = self.policy(prompt)
        ids = tok.encode(reply, add_special_tokens=False)
        if len(ids) < params.max_tokens:  # ends with eos, as a real reply that stops does
            ids, finish = ids + [self.engine.eos_ids[0]], "stop"
        else:  # cut at max_tokens, no eos, as a real engine cuts it
            ids, finish = ids[: params.max_tokens], "length"
            reply = tok.decode(ids)
        with torch.no_grad():
            logits = self.engine.model(torch.tensor([prompt_ids + ids])).logits[0].float()
        logps = torch.log_softmax(logits[len(prompt_ids) - 1 : -1], dim=-1)
        lps = logps[torch.arange(len(ids)), torch.tensor(ids)].tolist()
        return [
            Completion(
                prompt_ids=list(prompt_ids),
                completion_ids=ids,
                logprobs=lps,
                text=reply,
                finish_reason=finish,
                allowed_counts=_grammar_counts(constraint, ids, len(tok)),
            )
        ]


def _grammar_counts(grammar: Any, ids: list[int], vocab_size: int) -> list[int] | None:
    """A scripted reply run through the (real) grammar that was asked for: the per-token counts the local
    engine records (None without a grammar); a reply the grammar refuses fails the test."""
    return None if grammar is None else grammar.replay(ids, vocab_size)


def nth_reply(replies: list[str]) -> Callable[[str], str]:
    """A policy whose k-th reply in a conversation is ``replies[k]`` (k counted from the prompt's turns)."""
    return lambda prompt: replies[prompt.count("<|im_start|>assistant") - 1]


def run_episodes(
    engine: Any,
    workflow: Any,
    tasks: list[dict],
    sampling: SamplingParams,
    group_size: int = 1,
    **kwargs: Any,
) -> list:
    """``group_size`` episodes of ``workflow`` per task, through the real workflow runner."""
    runner = WorkflowRunner(workflow, engine, sampling, show_progress=False, **kwargs)
    return asyncio.run(runner.run_tasks(tasks, group_size=group_size))
