"""Shared by the gateway tests: the client-side view of a running gateway."""

from __future__ import annotations

import httpx
import openai

from rllm.gateway.traces import TraceStore
from rllm.inference.local import LocalEngine

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
