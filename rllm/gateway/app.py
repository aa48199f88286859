"""The model gateway: an OpenAI-compatible ASGI app that samples through an upstream (the in-process local
engine, or vLLM / SGLang / OpenAI-compatible servers) and records every call token-faithfully in a
:class:`~rllm.gateway.traces.TraceStore`.

An agent is pointed at ``{gateway}/sessions/{session_id}/v1`` as its OpenAI base URL; every call it makes
is stored under that session (``default`` for the plain ``/v1`` routes), and the workflow runner reads
the session's traces back to build the episode's steps.

Routes (each ``/v1`` route also under ``/sessions/{session_id}``):

- ``POST /v1/chat/completions``, ``POST /v1/completions`` (streaming or not; ``n``, ``stop``, ``seed``,
  ``tools`` / ``tool_choice``, ``response_format``, ``logprobs``; forced calls, JSON outputs and strict
  tools are grammar-constrained on the local engine: :mod:`rllm.gateway.structured`), ``GET /v1/models``;
- ``POST /v1/responses``: OpenAI's Responses API, translated to chat (:mod:`rllm.gateway.responses_api`);
- ``POST /v1/messages``, ``POST /v1/messages/count_tokens``: Anthropic's Messages API, translated to chat
  (:mod:`rllm.gateway.messages_api`; errors on these routes take Anthropic's shape);
- ``POST /sessions`` (create, with sampling overrides), ``GET /sessions``, ``GET /sessions/{id}``,
  ``DELETE /sessions/{id}``, ``GET /sessions/{id}/traces``, ``GET /traces`` (query), ``GET /health``;
- ``POST /admin/policy`` (``{"model", "weight_version", "adapters"}``): which model/adapter name an HTTP
  upstream asks for from now on, the served name of each named LoRA adapter, and the weight version its
  traces record (the trainer's weight sync sets it, possibly from another process).

A request whose ``model`` is ``"<gateway model name>:<adapter>"`` (e.g. ``policy:solver``) samples with that
LoRA adapter, on an upstream that serves several (an unknown adapter is a 400 naming the loaded ones); any
other ``model`` samples the single policy, as before.

Every error, bad input included, comes back in OpenAI's error shape (Anthropic's on the Messages routes)
with a 4xx status. The API key, when set, is accepted as ``Authorization: Bearer <key>`` or as Anthropic's
``x-api-key: <key>``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import re
import sqlite3
import time
import uuid
import zlib
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from starlette.applications import Starlette
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from rllm.gateway import messages_api
from rllm.gateway.group_commit import GroupCommit
from rllm.gateway.protocol import ChatCompletionRequest, CompletionRequest, OpenAIError, validation_error
from rllm.gateway.responses import completion_body, stream_chunks
from rllm.gateway.responses_api import ResponsesRequest, continue_from, response_body, stream_events, to_chat
from rllm.gateway.traces import OVERRIDABLE_SAMPLING, SessionInfo, Trace, TraceQuery, TraceStore
from rllm.gateway.upstreams import LocalUpstream, Upstream, UpstreamError, UpstreamRequest, UpstreamResult
from rllm.inference.base import SamplingParams

logger = logging.getLogger(__name__)

DEFAULT_SESSION = "default"
# '.' and '..' are excluded: HTTP clients resolve them away as dot segments of the URL.
SESSION_ID = re.compile(r"^(?!\.\.?$)[A-Za-z0-9._:~@+=-]{1,256}$")
_SESSION_ID_RULE = "a session id is 1-256 characters of letters, digits and . _ : ~ @ + = - (not '.' or '..')"
# A seeded session gives its k-th call the seed ``seed + k * _SEED_STRIDE`` (distinct, reproducible).
_SEED_STRIDE = 7919


class SessionCreate(BaseModel):
    """Body of ``POST /sessions``."""

    model_config = ConfigDict(extra="forbid")

    session_id: str | None = None
    sampling: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("session_id")
    @classmethod
    def _valid_id(cls, v: str | None) -> str | None:
        if v is not None and not SESSION_ID.match(v):
            raise ValueError(_SESSION_ID_RULE)
        return v


class PolicyUpdate(BaseModel):
    """Body of ``POST /admin/policy``: the model (or LoRA adapter) name later calls ask the upstream for
    (null keeps the current one) and the weight version their traces record."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = Field(None, min_length=1)
    weight_version: int = Field(ge=0, lt=2**63)
    # adapter name -> the name the servers serve it under (null keeps the current map)
    adapters: dict[str, str] | None = None


class _GatewayState:
    def __init__(self, upstream: Upstream, store: TraceStore, model_name: str) -> None:
        self.upstream = upstream
        self.store = store
        self.group_commit = GroupCommit(store) if store.fsync else None
        self.model_name = model_name
        # session id -> (overrides, calls made); an LRU so a long-lived gateway stays bounded.
        self.sessions: OrderedDict[str, list[Any]] = OrderedDict()
        self.max_cached_sessions = 100_000

    async def session_state(self, session_id: str) -> list[Any]:
        """``[sampling overrides, calls made]`` of a session. A role sub-session ``{id}:{role}`` that was
        not created itself inherits its parent's overrides, its seed shifted so roles sample differently."""
        st = self.sessions.get(session_id)
        if st is not None:
            self.sessions.move_to_end(session_id)
            return st
        info = await asyncio.to_thread(self.store.session, session_id)
        overrides = dict(info.sampling) if info and info.sampling else {}
        if not overrides and ":" in session_id:
            parent, role = session_id.rsplit(":", 1)
            inherited = dict((await self.session_state(parent))[0])
            if inherited.get("seed") is not None:
                inherited["seed"] += zlib.crc32(role.encode()) % 1_000_003
            overrides = inherited
        st = [overrides, info.num_traces if info else 0]
        self.remember(session_id, st)
        return st

    def remember(self, session_id: str, st: list[Any]) -> None:
        self.sessions[session_id] = st
        if len(self.sessions) > self.max_cached_sessions:
            self.sessions.popitem(last=False)


@dataclass(frozen=True)
class Sampled:
    """One sampled and recorded request, for the route that builds its reply."""

    session_id: str
    request_id: str
    created: int
    result: UpstreamResult


class _Api:
    """The gateway's route handlers over one :class:`_GatewayState`."""

    def __init__(self, state: _GatewayState, max_body_bytes: int) -> None:
        self.state = state
        self.max_body_bytes = max_body_bytes

    async def body_of(self, request: Request) -> bytes:
        chunks, size = [], 0
        try:
            async for chunk in request.stream():  # chunked uploads have no content-length to check up front
                size += len(chunk)
                if size > self.max_body_bytes:
                    raise OpenAIError(
                        413,
                        f"the request body is larger than the gateway's limit of {self.max_body_bytes} bytes",
                        code="request_too_large",
                    )
                chunks.append(chunk)
        except ClientDisconnect:  # the client hung up mid-body: nobody to answer, nothing to record
            raise OpenAIError(400, "the client disconnected before sending the whole body") from None
        return b"".join(chunks)

    def adapter_of(self, model: str) -> str | None:
        """The LoRA adapter a request's ``model`` names (``"<gateway model name>:<adapter>"``), else None."""
        prefix = f"{self.state.model_name}:"
        if not model.startswith(prefix):
            return None
        adapter = model[len(prefix) :]
        if not adapter:
            raise OpenAIError(400, f"model {model!r} names no adapter: use {prefix}<adapter>", param="model")
        return adapter

    async def chat_completions(self, request: Request) -> Response:
        req: ChatCompletionRequest = _parse(await self.body_of(request), ChatCompletionRequest)
        messages = [m.as_template_dict() for m in req.messages]
        tools = [t.model_dump(exclude_none=True) for t in req.tools] if req.tools else None
        up = {
            "endpoint": "chat.completions",
            "messages": messages,
            "tools": tools,
            "tool_choice": req.tool_choice,
            "response_format": req.response_format,
            "parallel_tool_calls": req.parallel_tool_calls,
            "logprobs": bool(req.logprobs),
            "max_tokens_given": req.max_tokens_given,
            "adapter": self.adapter_of(req.model),
        }
        record = {"messages": messages, "tools": tools, "tool_choice": req.tool_choice}
        if req.response_format is not None:
            record["response_format"] = req.response_format
        return await self._serve(request, req, up, record, req.to_sampling_params)

    async def completions(self, request: Request) -> Response:
        req: CompletionRequest = _parse(await self.body_of(request), CompletionRequest)
        up = {
            "endpoint": "completions",
            "prompt": req.prompt,
            "logprobs": req.logprobs is not None,
            "max_tokens_given": req.max_tokens_given,
            "adapter": self.adapter_of(req.model),
        }
        return await self._serve(request, req, up, {"prompt": req.prompt}, req.to_sampling_params)

    async def responses(self, request: Request) -> Response:
        """OpenAI's Responses API, translated to chat and recorded as chat (``rllm.gateway.responses_api``)."""
        req: ResponsesRequest = _parse(await self.body_of(request), ResponsesRequest)
        history: list[dict[str, Any]] = []
        if req.previous_response_id is not None:
            previous = await asyncio.to_thread(self.state.store.request, req.previous_response_id)
            history = continue_from(previous, req.previous_response_id)
        messages, tools, tool_choice = to_chat(req, history)
        up = {
            "endpoint": "chat.completions",
            "messages": messages,
            "tools": tools,
            "tool_choice": tool_choice,
            "response_format": req.response_format,
            "parallel_tool_calls": req.parallel_tool_calls,
            "logprobs": req.wants_logprobs,
            "max_tokens_given": req.max_output_tokens is not None,
        }
        record = {
            "messages": messages,
            "tools": tools,
            "tool_choice": tool_choice,
            "instructions": req.instructions,
            "previous_response_id": req.previous_response_id,
        }
        if req.response_format is not None:
            record["response_format"] = req.response_format
        sampled = await self.sample(
            request, up, record, req.to_sampling_params, prefix="resp_", api="responses"
        )
        body = response_body(
            req,
            sampled.request_id,
            sampled.created,
            self.state.model_name,
            sampled.result,
            record["sampling_params"],
        )
        if req.stream:
            return StreamingResponse(
                _aiter(stream_events(body)),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache"},
            )
        return JSONResponse(body)

    async def messages(self, request: Request) -> Response:
        """Anthropic's Messages API, translated to chat and recorded as chat (``rllm.gateway.messages_api``)."""
        req: messages_api.MessagesRequest = _parse(await self.body_of(request), messages_api.MessagesRequest)
        messages, tools, tool_choice = messages_api.to_chat(req)
        up = {
            "endpoint": "chat.completions",
            "messages": messages,
            "tools": tools,
            "tool_choice": tool_choice,
            "parallel_tool_calls": False
            if (req.tool_choice or {}).get("disable_parallel_tool_use")
            else None,
        }
        record = {"messages": messages, "tools": tools, "tool_choice": tool_choice}
        sampled = await self.sample(
            request, up, record, req.to_sampling_params, prefix="msg_", api="messages"
        )
        body = messages_api.message_body(sampled.request_id, self.state.model_name, sampled.result)
        if req.stream:
            return StreamingResponse(
                _aiter(messages_api.stream_events(body)),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache"},
            )
        return JSONResponse(body)

    async def count_tokens(self, request: Request) -> Response:
        """``{"input_tokens": N}``: the prompt a Messages call would be sampled from, rendered by the
        upstream with the chat template its sampling uses."""
        req = _parse(await self.body_of(request), messages_api.CountTokensRequest)
        session_id = _session_id(request)
        messages, tools, tool_choice = messages_api.to_chat(req)
        count = getattr(self.state.upstream, "count_tokens", None)
        if count is None:
            raise OpenAIError(400, f"the upstream {self.state.upstream.name!r} cannot count tokens")
        up = UpstreamRequest(
            endpoint="chat.completions",
            messages=messages,
            tools=tools,
            tool_choice=tool_choice,
            params=SamplingParams(),
        )
        try:
            n = await count(up, session_id=session_id)
        except UpstreamError as exc:
            raise OpenAIError(exc.status_code, exc.message) from exc
        return JSONResponse({"input_tokens": n})

    async def _serve(
        self, request: Request, req: Any, up: dict[str, Any], record: dict[str, Any], build: Any
    ) -> Response:
        endpoint = up["endpoint"]
        sampled = await self.sample(
            request, up, record, build, prefix="chatcmpl-" if endpoint == "chat.completions" else "cmpl-"
        )
        if req.stream:
            include_usage = bool(req.stream_options and req.stream_options.include_usage)
            chunks = stream_chunks(
                endpoint,
                sampled.request_id,
                sampled.created,
                self.state.model_name,
                sampled.result,
                include_usage=include_usage,
            )
            return StreamingResponse(
                _aiter(chunks), media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
            )
        return JSONResponse(
            completion_body(
                endpoint,
                sampled.request_id,
                sampled.created,
                self.state.model_name,
                sampled.result,
                token_ids=bool(req.return_token_ids),
            )
        )

    async def sample(
        self,
        request: Request,
        up: dict[str, Any],
        record: dict[str, Any],
        build: Any,
        *,
        prefix: str,
        api: str | None = None,
    ) -> Sampled:
        """Sample one validated request through the upstream and commit its traces (one per choice)
        before returning: every API the gateway speaks (chat, text, and the ones translated to chat)
        records through here. ``up`` holds the :class:`UpstreamRequest` fields bar ``params``; ``record``
        is what the trace stores as its request; ``build`` makes the client's sampling params; ``prefix``
        starts the request id; ``api`` is the trace's endpoint when it differs from ``up["endpoint"]``."""
        session_id = _session_id(request)
        st = await self.state.session_state(session_id)
        params = _sampling_params(build, st)
        if "max_tokens" in st[0]:
            up["max_tokens_given"] = True
        record["sampling_params"] = params.model_dump()
        endpoint = up["endpoint"]
        request_id = prefix + uuid.uuid4().hex
        t0 = time.perf_counter()
        try:
            result = await self.state.upstream.complete(
                UpstreamRequest(params=params, **up), session_id=session_id
            )
        except UpstreamError as exc:
            kind = "invalid_request_error" if exc.status_code < 500 else "upstream_error"
            raise OpenAIError(exc.status_code, exc.message, type=kind) from exc
        latency_ms = (time.perf_counter() - t0) * 1000.0
        traces = [
            Trace(
                session_id=session_id,
                request_id=request_id,
                choice_index=i,
                endpoint=api or endpoint,
                request=record,
                response_text=c.text,
                response_message=(
                    {"role": "assistant", "content": c.text, "tool_calls": c.tool_calls}
                    if endpoint == "chat.completions"
                    else None
                ),
                prompt_token_ids=result.prompt_ids,
                completion_token_ids=c.completion_ids,
                logprobs=c.logprobs,
                completion_mask=c.completion_mask,
                finish_reason=c.finish_reason,
                latency_ms=latency_ms,
                weight_version=result.weight_version,
                last_weight_version=result.last_weight_version,
                trainable=result.trainable,
                upstream=result.upstream,
            )
            for i, c in enumerate(result.choices)
        ]
        await self._record(traces)
        return Sampled(session_id, request_id, int(time.time()), result)

    async def _record(self, traces: list[Trace]) -> None:
        """Commit a request's traces. The reply is sent only after they are committed: an acknowledged call
        is never lost. A store that cannot write (disk full, read-only, an I/O error) fails the call with a
        503 that says so: the sampled reply is withheld, since training could never see it, and the
        store's committed rows stay as they were (the failed transaction is rolled back)."""
        store = self.state.store
        try:
            # Without fsync, on the loop, not in a thread: a WAL commit takes tens of microseconds, less than
            # the thread hand-off. With fsync=True the calls waiting meanwhile share one transaction (one
            # fsync), written in a thread so the loop serves on while the disk syncs.
            if self.state.group_commit is not None:
                await self.state.group_commit.record(traces)
            else:
                store.add_many(traces)
        except sqlite3.Error as exc:
            logger.error("the trace store %s could not record a call: %s", store.path, exc)
            raise OpenAIError(
                503,
                f"the gateway's trace store ({store.path}) could not record this call ({exc}), so its reply "
                "is withheld: free disk space or fix the store's permissions, then retry",
                type="server_error",
                code="trace_store_unavailable",
            ) from exc

    async def list_models(self, request: Request) -> Response:
        _session_id(request)
        return JSONResponse(
            {
                "object": "list",
                "data": [{"id": self.state.model_name, "object": "model", "created": 0, "owned_by": "rllm"}],
            }
        )

    async def create_session(self, request: Request) -> Response:
        body = _parse(await self.body_of(request), SessionCreate)
        sampling = _check_overrides(body.sampling)
        info = SessionInfo(
            session_id=body.session_id or uuid.uuid4().hex, sampling=sampling, metadata=body.metadata
        )
        try:
            await asyncio.to_thread(self.state.store.create_session, info)
        except KeyError:
            raise OpenAIError(
                409,
                f"session {info.session_id!r} already exists: delete it first or pick another id",
                param="session_id",
                code="session_exists",
            ) from None
        self.state.remember(info.session_id, [sampling, 0])
        return JSONResponse(
            {**info.model_dump(), "base_url": f"/sessions/{info.session_id}/v1"}, status_code=201
        )

    async def list_sessions(self, request: Request) -> Response:
        return JSONResponse({"sessions": await asyncio.to_thread(self.state.store.sessions)})

    async def get_session(self, request: Request) -> Response:
        session_id = _session_id(request)
        info = await asyncio.to_thread(self.state.store.session, session_id)
        if info is None:
            raise OpenAIError(404, f"no session {session_id!r}", type="not_found_error", param="session_id")
        return JSONResponse(info.model_dump())

    async def delete_session(self, request: Request) -> Response:
        session_id = _session_id(request)
        n = await asyncio.to_thread(self.state.store.delete_session, session_id)
        self.state.sessions.pop(session_id, None)
        return JSONResponse({"session_id": session_id, "deleted": True, "deleted_traces": n})

    async def session_traces(self, request: Request) -> Response:
        q = TraceQuery(session_id=_session_id(request), limit=10_000)
        rows = await asyncio.to_thread(self.state.store.query, q)
        return JSONResponse({"traces": [t.public() for _, t in rows]})

    async def query_traces(self, request: Request) -> Response:
        try:
            q = TraceQuery.model_validate(dict(request.query_params))
        except ValidationError as exc:
            raise validation_error(exc) from exc
        rows = await asyncio.to_thread(self.state.store.query, q)
        return JSONResponse(
            {
                "traces": [{"seq": seq, **t.public()} for seq, t in rows],
                "last_seq": rows[-1][0] if rows else q.after_seq,
            }
        )

    async def set_policy(self, request: Request) -> Response:
        body = _parse(await self.body_of(request), PolicyUpdate)
        if not hasattr(self.state.upstream, "set_policy"):
            raise OpenAIError(
                400,
                f"the upstream {self.state.upstream.name!r} has no policy to set: an in-process "
                "engine takes its weights (and version) from the trainer directly",
            )
        self.state.upstream.set_policy(body.model, body.weight_version, body.adapters)
        return JSONResponse(
            {
                "model": getattr(self.state.upstream, "model", None),
                "adapters": getattr(self.state.upstream, "adapters", None),
                "weight_version": body.weight_version,
            }
        )

    async def health(self, request: Request) -> Response:
        h = await self.state.upstream.health()
        return JSONResponse(h, status_code=200 if h.get("ok") else 503)

    def routes(self) -> list[Route]:
        routes = []
        for prefix in ("", "/sessions/{session_id}"):
            routes += [
                Route(f"{prefix}/v1/chat/completions", self.chat_completions, methods=["POST"]),
                Route(f"{prefix}/v1/completions", self.completions, methods=["POST"]),
                Route(f"{prefix}/v1/responses", self.responses, methods=["POST"]),
                Route(f"{prefix}/v1/messages", self.messages, methods=["POST"]),
                Route(f"{prefix}/v1/messages/count_tokens", self.count_tokens, methods=["POST"]),
                Route(f"{prefix}/v1/models", self.list_models, methods=["GET"]),
            ]
        return [
            *routes,
            Route("/sessions", self.create_session, methods=["POST"]),
            Route("/sessions", self.list_sessions, methods=["GET"]),
            Route("/sessions/{session_id}", self.get_session, methods=["GET"]),
            Route("/sessions/{session_id}", self.delete_session, methods=["DELETE"]),
            Route("/sessions/{session_id}/traces", self.session_traces, methods=["GET"]),
            Route("/traces", self.query_traces, methods=["GET"]),
            Route("/health", self.health, methods=["GET"]),
            Route("/admin/policy", self.set_policy, methods=["POST"]),
        ]


def create_app(
    upstream: Upstream | Any,
    store: TraceStore,
    *,
    model_name: str,
    api_key: str | None = None,
    max_body_bytes: int = 16 * 1024 * 1024,
) -> Starlette:
    """Build the gateway app. ``upstream`` may be an inference engine (wrapped in :class:`LocalUpstream`).
    ``api_key``, when given, is required on every route, as ``Authorization: Bearer <key>`` or
    ``x-api-key: <key>`` (Anthropic's header)."""
    if not hasattr(upstream, "complete"):
        upstream = LocalUpstream(upstream)
    state = _GatewayState(upstream, store, model_name)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await upstream.aclose()  # e.g. an HTTP upstream's connection pool and health checks

    app = Starlette(
        lifespan=lifespan,
        routes=_Api(state, max_body_bytes).routes(),
        middleware=[Middleware(_Guard, api_key=api_key, max_body_bytes=max_body_bytes)],
        exception_handlers={
            OpenAIError: _openai_error,
            StarletteHTTPException: _http_error,
            Exception: _server_error,
        },
    )
    app.state.gateway = state
    app.state.upstream = upstream
    app.state.store = store
    return app


async def _aiter(chunks: Any) -> Any:
    for c in chunks:
        yield c


def _session_id(request: Request) -> str:
    session_id = request.path_params.get("session_id", DEFAULT_SESSION)
    if not SESSION_ID.match(session_id):
        raise OpenAIError(400, _SESSION_ID_RULE, param="session_id")
    return session_id


def _check_overrides(sampling: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(sampling) - set(OVERRIDABLE_SAMPLING))
    if unknown:
        raise OpenAIError(
            400,
            f"sampling overrides may set {', '.join(OVERRIDABLE_SAMPLING)}; not {', '.join(unknown)}",
            param="sampling",
        )
    try:
        SamplingParams.model_validate(sampling)
    except ValidationError as exc:
        err = validation_error(exc)
        raise OpenAIError(400, f"sampling.{err.message}", param="sampling") from exc
    return sampling


def _sampling_params(build: Any, session_state: list[Any]) -> SamplingParams:
    """The request's params with the session's overrides on top; a seeded session seeds each call."""
    try:
        params = build()
        overrides, calls = session_state
        if overrides:
            merged = {**params.model_dump(), **overrides}
            if overrides.get("seed") is not None:
                merged["seed"] = overrides["seed"] + _SEED_STRIDE * calls
            params = SamplingParams.model_validate(merged)
    except ValidationError as exc:
        raise validation_error(exc) from exc
    session_state[1] += 1
    return params


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON (JSON has no NaN or infinities)")


def _parse(body: bytes, model: type[BaseModel]) -> Any:
    try:
        # Strict UTF-8 (no encoded surrogates) and no NaN/Infinity: what is stored must read back as JSON.
        data = json.loads(body.decode("utf-8"), parse_constant=_reject_constant)
        if b"\\u" in body:  # only an escaped lone surrogate ("\ud800") can fail to re-encode as UTF-8
            json.dumps(data, ensure_ascii=False).encode("utf-8")
    except (ValueError, UnicodeError) as exc:
        raise OpenAIError(400, f"the request body is not valid JSON: {_printable(exc)}") from exc
    except RecursionError as exc:
        raise OpenAIError(400, "the request body is nested too deeply") from exc
    if not isinstance(data, dict):
        raise OpenAIError(400, "the request body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc) from exc
    except RecursionError as exc:
        raise OpenAIError(400, "the request body is nested too deeply") from exc


def _printable(exc: Exception) -> str:
    return str(exc).encode("utf-8", "backslashreplace").decode("utf-8")[:300]


def _error(err: OpenAIError, path: str) -> JSONResponse:
    """The error in the shape of the API the path speaks: Anthropic's on the Messages routes, else OpenAI's."""
    body = messages_api.error_body(err) if messages_api.is_messages_path(path) else err.body()
    return JSONResponse(body, status_code=err.status_code)


async def _openai_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, OpenAIError)
    return _error(exc, request.url.path)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
    return _error(OpenAIError(exc.status_code, str(exc.detail), type=kind), request.url.path)


async def _server_error(request: Request, exc: Exception) -> Response:
    logger.exception("gateway request failed")
    err = OpenAIError(500, f"the gateway failed: {type(exc).__name__}: {exc}", type="server_error")
    return _error(err, request.url.path)


class _Guard:
    """Pure ASGI middleware (no per-request task like BaseHTTPMiddleware): the API key, and a body-size
    limit checked on ``content-length`` before anything is read."""

    def __init__(self, app: ASGIApp, *, api_key: str | None, max_body_bytes: int) -> None:
        self.app = app
        self.api_key = api_key.encode() if api_key is not None else None
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        err = None
        if self.api_key is not None and not self._authorized(headers):
            err = OpenAIError(
                401,
                "missing or wrong API key: send 'Authorization: Bearer <key>' (or 'x-api-key: <key>') with "
                "the gateway's key",
                code="invalid_api_key",
            )
        length = headers.get(b"content-length")
        if err is None and length is not None and (not length.isdigit() or int(length) > self.max_body_bytes):
            err = OpenAIError(
                413,
                f"the request body is larger than the gateway's limit of {self.max_body_bytes} bytes",
                code="request_too_large",
            )
        if err is not None:
            await _error(err, scope.get("path", ""))(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _authorized(self, headers: dict[bytes, bytes]) -> bool:
        """The key as a bearer token (OpenAI clients) or in ``x-api-key`` (Anthropic clients)."""
        assert self.api_key is not None
        scheme, _, token = headers.get(b"authorization", b"").partition(b" ")
        if scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self.api_key):
            return True
        key = headers.get(b"x-api-key")
        return key is not None and hmac.compare_digest(key.strip(), self.api_key)
