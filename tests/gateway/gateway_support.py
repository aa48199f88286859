"""Shared by the gateway tests: the client-side view of a running gateway."""

from __future__ import annotations

from typing import Any

import httpx
import openai

from rllm.gateway.app import create_app
from rllm.gateway.server import GatewayServer
from rllm.gateway.traces import TraceStore
from rllm.inference.base import Completion, EngineBase, EngineCapabilities, SamplingParams
from rllm.inference.local import LocalEngine
from rllm.runner.assembly import assemble_steps

API_KEY = "test-key"
MODEL = "tiny"


class GatewayFixture:
    def __init__(self, url: str, engine: LocalEngine, store: TraceStore) -> None:
        self.url, self.engine, self.store = url, engine, store

    def client(self, session: str | None = None, api_key: str = API_KEY) -> openai.OpenAI:
        return openai.OpenAI(base_url=self._base(session), api_key=api_key, max_retries=0, timeout=60)

    def async_client(self, session: str | None = None) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=self._base(session), api_key=API_KEY, max_retries=0, timeout=60)

    def _base(self, session: str | None) -> str:
        return f"{self.url}/v1" if session is None else f"{self.url}/sessions/{session}/v1"

    def http(self, method: str, path: str, **kwargs: object) -> httpx.Response:
        return httpx.request(
            method, f"{self.url}{path}", headers={"Authorization": f"Bearer {API_KEY}"}, timeout=60, **kwargs
        )  # type: ignore[arg-type]

    def traces(self, session: str) -> list[dict]:
        r = self.http("GET", f"/sessions/{session}/traces")
        assert r.status_code == 200, r.text
        return r.json()["traces"]


FAKE_CAPABILITIES = EngineCapabilities(name="fake", weight_transfer="tensors", constraints=True)


class ScriptedEngine(EngineBase):
    """FAKE engine: the k-th call gets the k-th scripted reply (real tokenizer, eos appended), because a
    tiny random model never writes a tool call. Renderer, tool parser, gateway and client are real."""

    capabilities = FAKE_CAPABILITIES

    def __init__(self, tokenizer: Any, replies: list[str]) -> None:
        self.tokenizer, self.replies, self.weight_version = tokenizer, list(replies), 5
        self.prompts: list[list[int]] = []

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, *, constraint: Any = None
    ) -> list[Completion]:
        reply = self.replies[len(self.prompts) % len(self.replies)]
        self.prompts.append(list(prompt_ids))
        ids = self.tokenizer(reply, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
        return [
            Completion(
                prompt_ids=prompt_ids,
                completion_ids=ids,
                logprobs=[-0.25] * len(ids),
                text=reply,
                finish_reason="stop",
                weight_version=5,
                allowed_counts=grammar_counts(constraint, ids, len(self.tokenizer)),
            )
        ]


def grammar_counts(grammar: Any, ids: list[int], vocab_size: int) -> list[int] | None:
    """A scripted reply run through the (real) grammar that was asked for: the per-token counts the local
    engine records (None without a grammar); a reply the grammar refuses fails the test."""
    return None if grammar is None else grammar.replay(ids, vocab_size)


def scripted_server(tiny_engine: Any, replies: list[str], store: TraceStore) -> GatewayServer:
    return GatewayServer(create_app(ScriptedEngine(tiny_engine.tokenizer, replies), store, model_name=MODEL))


def assert_one_merged_step(traces: list) -> None:
    (step,), metrics = assemble_steps(traces)
    t1, t2 = traces
    n1, n2 = len(t1.completion_token_ids), len(t2.completion_token_ids)
    between = t2.prompt_token_ids[len(t1.prompt_token_ids) + n1 :]
    assert metrics["assembly/merged_calls"] == 1 and metrics["assembly/drift_splits"] == 0
    assert step.response_ids == t1.completion_token_ids + between + t2.completion_token_ids
    # Each turn's own mask (all 1, or a strict tool's grammar marking the call's fixed text 0).
    m1, m2 = t1.sampled_mask, t2.sampled_mask
    assert len(m1) == n1 and len(m2) == n2
    assert step.response_mask == m1 + [0] * len(between) + m2
    assert step.logprobs == [-0.25 if m else 0.0 for m in m1] + [0.0] * len(between) + [
        -0.25 if m else 0.0 for m in m2
    ]
    assert step.weight_version == 5
