"""The model gateway: an OpenAI-compatible ASGI app that samples through an inference engine in-process
and records every call token-faithfully in a :class:`~rllm.gateway.traces.TraceStore`.

An agent is pointed at ``{gateway}/sessions/{session_id}/v1`` as its OpenAI base URL; every call it makes
is stored under that session (``default`` for the plain ``/v1`` routes), and the workflow engine reads
the session's traces back (``GET /sessions/{session_id}/traces``) to build the episode's steps.

Served now: ``POST /v1/chat/completions`` and ``POST /v1/completions`` (non-streaming; ``n``, ``stop``,
``max_tokens`` / ``max_completion_tokens``, ``temperature``, ``top_p``, ``seed``), ``GET /v1/models``,
all also under ``/sessions/{session_id}``. Errors always come back in OpenAI's error shape.

What comes next: streaming (SSE), tool calls (tool-call parsers per chat template), upstream adapters
(vLLM / SGLang / any OpenAI-compatible server, which must return token ids and logprobs), the
``rllm gateway`` CLI command, and the SDK's ``@rllm.rollout`` session helpers.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
import uuid
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from rllm.gateway.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    OpenAIError,
    validation_error,
)
from rllm.gateway.traces import Trace, TraceStore
from rllm.inference.base import Completion, InferenceEngine, SamplingParams

logger = logging.getLogger(__name__)

DEFAULT_SESSION = "default"


def create_app(
    engine: InferenceEngine, store: TraceStore, *, model_name: str, api_key: str | None = None
) -> FastAPI:
    """Build the gateway app. ``api_key``, when given, is required as ``Authorization: Bearer <key>``."""
    app = FastAPI(title="rllm gateway", docs_url=None, redoc_url=None)
    app.state.engine = engine
    app.state.store = store
    app.state.model_name = model_name
    _install_error_handlers(app)

    @app.middleware("http")
    async def check_api_key(request: Request, call_next: Any) -> Any:
        if api_key is not None:
            header = request.headers.get("authorization", "")
            scheme, _, token = header.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip(), api_key):
                err = OpenAIError(
                    401,
                    "missing or wrong API key: send 'Authorization: Bearer <key>' with the gateway's key",
                    code="invalid_api_key",
                )
                return JSONResponse(err.body(), status_code=401)
        return await call_next(request)

    async def chat_completions(request: Request) -> JSONResponse:
        req = await _parse(request, ChatCompletionRequest)
        params = _sampling_params(req.to_sampling_params)
        messages = [m.as_template_dict() for m in req.messages]
        try:
            prompt_ids = engine.apply_chat_template(messages)
        except Exception as exc:  # the template rejects some message orders (e.g. two system messages)
            raise OpenAIError(400, f"the chat template cannot render these messages: {exc}",
                              param="messages") from exc
        record = {"messages": messages, "sampling_params": params.model_dump()}
        return await _sample_and_record(
            request, "chat.completions", prompt_ids, params, record,
            lambda i, c: {"index": i, "message": {"role": "assistant", "content": c.text},
                          "finish_reason": c.finish_reason, "logprobs": None},
        )

    async def completions(request: Request) -> JSONResponse:
        req = await _parse(request, CompletionRequest)
        params = _sampling_params(req.to_sampling_params)
        if isinstance(req.prompt, str):
            prompt_ids = _encode(engine, req.prompt)
        else:
            prompt_ids = list(req.prompt)
        record = {"prompt": req.prompt, "sampling_params": params.model_dump()}
        return await _sample_and_record(
            request, "completions", prompt_ids, params, record,
            lambda i, c: {"index": i, "text": c.text, "finish_reason": c.finish_reason, "logprobs": None},
        )

    async def list_models(request: Request) -> JSONResponse:
        return JSONResponse({
            "object": "list",
            "data": [{"id": model_name, "object": "model", "created": 0, "owned_by": "rllm"}],
        })

    async def session_traces(request: Request) -> JSONResponse:
        traces = await asyncio.to_thread(store.list, request.path_params["session_id"])
        return JSONResponse({"traces": [t.model_dump() for t in traces]})

    async def list_sessions(request: Request) -> JSONResponse:
        return JSONResponse({"sessions": await asyncio.to_thread(store.sessions)})

    for prefix in ("", "/sessions/{session_id}"):
        app.add_api_route(f"{prefix}/v1/chat/completions", chat_completions, methods=["POST"])
        app.add_api_route(f"{prefix}/v1/completions", completions, methods=["POST"])
        app.add_api_route(f"{prefix}/v1/models", list_models, methods=["GET"])
    app.add_api_route("/sessions/{session_id}/traces", session_traces, methods=["GET"])
    app.add_api_route("/sessions", list_sessions, methods=["GET"])
    return app


async def _sample_and_record(
    request: Request,
    endpoint: str,
    prompt_ids: list[int],
    params: SamplingParams,
    record: dict[str, Any],
    make_choice: Any,
) -> JSONResponse:
    """Sample ``params.n`` choices, store one trace per choice (committed before replying), reply."""
    state = request.app.state
    session_id = request.path_params.get("session_id", DEFAULT_SESSION)
    if not prompt_ids:
        raise OpenAIError(400, "the prompt renders to no tokens", param="prompt")
    request_id = ("chatcmpl-" if endpoint == "chat.completions" else "cmpl-") + uuid.uuid4().hex
    t0 = time.perf_counter()
    completions: list[Completion] = await state.engine.generate(prompt_ids, params)
    latency_ms = (time.perf_counter() - t0) * 1000.0
    traces = [
        Trace(
            session_id=session_id, request_id=request_id, choice_index=i, endpoint=endpoint,
            request=record, response_text=c.text, prompt_token_ids=c.prompt_ids,
            completion_token_ids=c.completion_ids, logprobs=c.logprobs, finish_reason=c.finish_reason,
            latency_ms=latency_ms, weight_version=c.weight_version,
        )
        for i, c in enumerate(completions)
    ]
    # The reply is sent only after the traces are on disk: an acknowledged call is never lost.
    await asyncio.to_thread(state.store.add_many, traces)
    completion_tokens = sum(len(c.completion_ids) for c in completions)
    return JSONResponse({
        "id": request_id,
        "object": "chat.completion" if endpoint == "chat.completions" else "text_completion",
        "created": int(time.time()),
        "model": state.model_name,
        "choices": [make_choice(i, c) for i, c in enumerate(completions)],
        "usage": {
            "prompt_tokens": len(prompt_ids),
            "completion_tokens": completion_tokens,
            "total_tokens": len(prompt_ids) + completion_tokens,
        },
    })


async def _parse(request: Request, model: type[BaseModel]) -> Any:
    try:
        body = await request.json()
    except Exception as exc:
        raise OpenAIError(400, f"the request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise OpenAIError(400, "the request body must be a JSON object")
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise validation_error(exc) from exc


def _sampling_params(build: Any) -> SamplingParams:
    try:
        return build()
    except ValidationError as exc:
        raise validation_error(exc) from exc


def _encode(engine: InferenceEngine, text: str) -> list[int]:
    tokenizer = getattr(engine, "tokenizer", None)
    if tokenizer is None:
        raise OpenAIError(400, "this engine takes text prompts only as token id lists", param="prompt")
    return list(tokenizer(text)["input_ids"])


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(OpenAIError)
    async def openai_error(request: Request, exc: OpenAIError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status_code)

    @app.exception_handler(RequestValidationError)
    async def request_validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(OpenAIError(400, f"invalid request: {exc.errors()}").body(), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        err = OpenAIError(exc.status_code, str(exc.detail), type=kind)
        return JSONResponse(err.body(), status_code=exc.status_code)

    @app.exception_handler(Exception)
    async def server_error(request: Request, exc: Exception) -> JSONResponse:
        logger.exception("gateway request failed")
        err = OpenAIError(500, f"the gateway failed: {type(exc).__name__}: {exc}", type="server_error")
        return JSONResponse(err.body(), status_code=500)
