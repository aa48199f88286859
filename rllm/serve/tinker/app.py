"""The HTTP face of the Tinker service: a Starlette app with the routes the tinker SDK (0.38) calls.

Request bodies are read with the SDK's own request models (``tinker.types.*Request``, strict: an unknown
field is refused), except ``/forward_backward``, which the SDK sends as protobuf (:mod:`.wire`). Every
refusal is an HTTP status with ``{"detail": "<one line>"}``, which the SDK raises as
``tinker.BadRequestError`` / ``NotFoundError`` / ``AuthenticationError`` with that text. Codes that the SDK
retries (408, 409, 429, 5xx) are never used for a refusal.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from tinker import types

from rllm.serve.tinker.futures import UnknownFutureError
from rllm.serve.tinker.service import ServeError, TinkerService
from rllm.serve.tinker.wire import WireError, decode_forward_backward

logger = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)
PROTO = "application/x-protobuf"
# retrieve_future holds a pending request this long before answering "try again" (the SDK re-asks at
# once, and waits 45 s for an answer).
LONG_POLL_S = 40.0
# Server-side flags the SDK fetches first (``ClientConfigResponse``): API keys as they are (no JWT
# exchange), httpx's own transport, uncompressed fwd/bwd bodies, and per-request result polling.
CLIENT_CONFIG = types.ClientConfigResponse(
    pjwt_auth_enabled=False,
    use_pyqwest_transport=False,
    proto_compress_fwdbwd=False,
    parallel_fwdbwd_chunks=True,
    sample_use_retrieve_futures=False,
    custom_loss_server_side=False,
    sample_join_sampling_session=True,
)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"detail": message}, status_code=status)


async def _parse(request: Request, model: type[M]) -> M:
    try:
        return model.model_validate(await request.json())
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "body"
        raise ServeError(400, f"invalid {model.__name__}: {where}: {err['msg']}") from None
    except ValueError as exc:  # not JSON at all
        raise ServeError(400, f"invalid {model.__name__}: the body is not JSON ({exc})") from None


Handler = Callable[[TinkerService, Request], Awaitable[Response | dict[str, Any]]]


def _route(path: str, handler: Handler, methods: tuple[str, ...] = ("POST",)) -> Route:
    """A route whose handler returns a JSON dict (or a response) and may raise ``ServeError``."""

    async def endpoint(request: Request) -> Response:
        service: TinkerService = request.app.state.service
        try:
            out = await handler(service, request)
        except ServeError as exc:
            return _error(exc.status, exc.message)
        return out if isinstance(out, Response) else JSONResponse(out)

    return Route(path, endpoint, methods=list(methods))


# ---------------------------------------------------------------------- session and housekeeping
async def healthz(service: TinkerService, request: Request) -> dict[str, Any]:
    return {"status": "ok"}


async def client_config(service: TinkerService, request: Request) -> dict[str, Any]:
    return CLIENT_CONFIG.model_dump()


async def dynamic_config(service: TinkerService, request: Request) -> dict[str, Any]:
    return types.ClientDynamicConfigResponse().model_dump()


async def auth_token(service: TinkerService, request: Request) -> dict[str, Any]:
    raise ServeError(404, "this server takes the API key itself (no JWT exchange): pjwt_auth_enabled is off")


async def capabilities(service: TinkerService, request: Request) -> dict[str, Any]:
    served = service.served
    model = {
        "model_name": served.name,
        "max_context_length": served.max_context,
        "trainable": True,
        "sampleable": True,
    }
    return {"supported_models": [model]}


async def create_session(service: TinkerService, request: Request) -> dict[str, Any]:
    await _parse(request, types.CreateSessionRequest)
    return {"type": "create_session", "session_id": service.create_session()}


async def heartbeat(service: TinkerService, request: Request) -> dict[str, Any]:
    req = await _parse(request, types.SessionHeartbeatRequest)
    service.heartbeat(req.session_id)
    return {"type": "session_heartbeat"}


async def finish_session(service: TinkerService, request: Request) -> dict[str, Any]:
    service.finish_session(request.path_params["session_id"])
    return {}


async def telemetry(service: TinkerService, request: Request) -> dict[str, Any]:
    return {"status": "accepted"}  # accepted and dropped: nothing is collected


# ---------------------------------------------------------------------- training
async def create_model(service: TinkerService, request: Request) -> dict[str, Any]:
    return service.create_model(await _parse(request, types.CreateModelRequest))


async def get_info(service: TinkerService, request: Request) -> dict[str, Any]:
    return service.get_info((await _parse(request, types.GetInfoRequest)).model_id)


async def forward_backward(service: TinkerService, request: Request) -> dict[str, Any]:
    if PROTO not in request.headers.get("content-type", ""):
        raise ServeError(400, f"forward_backward takes a protobuf body ({PROTO}), as the tinker SDK sends it")
    try:
        call = decode_forward_backward(await request.body(), request.headers.get("content-encoding"))
    except WireError as exc:
        raise ServeError(400, str(exc)) from None
    return service.forward_backward(call)


async def optim_step(service: TinkerService, request: Request) -> dict[str, Any]:
    req = await _parse(request, types.OptimStepRequest)
    return service.optim_step(req.model_id, req.seq_id, req.optim_params)


async def save_for_sampler(service: TinkerService, request: Request) -> dict[str, Any]:
    return service.save_for_sampler(await _parse(request, types.SaveWeightsForSamplerRequest))


async def save_weights(service: TinkerService, request: Request) -> dict[str, Any]:
    return service.save_state(await _parse(request, types.SaveWeightsRequest))


async def save_external(service: TinkerService, request: Request) -> dict[str, Any]:
    req = await _parse(request, types.SaveWeightsExternalRequest)
    return service.refuse_model_op(req.model_id, req.seq_id, "save_weights_external")


async def load_weights(service: TinkerService, request: Request) -> dict[str, Any]:
    return service.load_weights(await _parse(request, types.LoadWeightsRequest))


# ---------------------------------------------------------------------- sampling
async def create_sampling_session(service: TinkerService, request: Request) -> dict[str, Any]:
    sid = service.create_sampling_session(await _parse(request, types.CreateSamplingSessionRequest))
    return {"type": "create_sampling_session", "sampling_session_id": sid}


async def join_sampling_session(service: TinkerService, request: Request) -> dict[str, Any]:
    req = await _parse(request, types.JoinSamplingSessionRequest)
    sampling = service.sampling_session(req.sampling_session_id)
    counter = sampling.clients
    sampling.clients += 1
    return {"type": "join_sampling_session", "client_counter": counter}


async def get_sampler(service: TinkerService, request: Request) -> dict[str, Any]:
    return service.sampler_info(request.path_params["sampler_id"])


async def asample(service: TinkerService, request: Request) -> dict[str, Any]:
    return service.asample(await _parse(request, types.SampleRequest))


# ---------------------------------------------------------------------- futures
async def retrieve_future(service: TinkerService, request: Request) -> Response:
    """A finished request's result (protobuf for fwd/bwd and samples, JSON otherwise), its error
    (``{"error", "category"}``, which the SDK raises as ``RequestFailedError``), or "try again"."""
    req = await _parse(request, types.FutureRetrieveRequest)
    try:
        record = await service.futures.wait(req.request_id, LONG_POLL_S)
    except UnknownFutureError:
        raise ServeError(404, f"unknown request_id {req.request_id!r}") from None
    if not record.done.is_set():
        return JSONResponse({"type": "try_again", "request_id": record.request_id, "queue_state": "active"})
    if record.error is not None:
        return JSONResponse({"error": record.error, "category": record.category})
    if record.proto is not None:
        return Response(record.proto, media_type=PROTO)
    return JSONResponse(record.result)


async def unsupported(service: TinkerService, request: Request) -> dict[str, Any]:
    raise ServeError(404, f"{request.url.path} is not supported by rllm serve tinker")


ROUTES: list[tuple[str, Handler, tuple[str, ...]]] = [
    ("/api/v1/healthz", healthz, ("GET",)),
    ("/api/v1/client/config", client_config, ("POST",)),
    ("/api/v1/client/dynamic_config", dynamic_config, ("POST",)),
    ("/api/v1/auth/token", auth_token, ("POST",)),
    ("/api/v1/get_server_capabilities", capabilities, ("GET",)),
    ("/api/v1/create_session", create_session, ("POST",)),
    ("/api/v1/session_heartbeat", heartbeat, ("POST",)),
    ("/api/v1/sessions/{session_id}/finish", finish_session, ("POST",)),
    ("/api/v1/telemetry", telemetry, ("POST",)),
    ("/api/v1/create_model", create_model, ("POST",)),
    ("/api/v1/get_info", get_info, ("POST",)),
    ("/api/v1/forward_backward", forward_backward, ("POST",)),
    ("/api/v1/optim_step", optim_step, ("POST",)),
    ("/api/v1/save_weights_for_sampler", save_for_sampler, ("POST",)),
    ("/api/v1/save_weights", save_weights, ("POST",)),
    ("/api/v1/save_weights_external", save_external, ("POST",)),
    ("/api/v1/load_weights", load_weights, ("POST",)),
    ("/api/v1/create_sampling_session", create_sampling_session, ("POST",)),
    ("/api/v1/join_sampling_session", join_sampling_session, ("POST",)),
    ("/api/v1/samplers/{sampler_id}", get_sampler, ("GET",)),
    ("/api/v1/asample", asample, ("POST",)),
    ("/api/v1/retrieve_future", retrieve_future, ("POST",)),
    ("/api/v1/create_custom_loss", unsupported, ("POST",)),
    ("/api/v1/retrieve_futures", unsupported, ("POST",)),
]


class ApiKeyMiddleware(BaseHTTPMiddleware):
    """With ``--api-key``, every request but the health check must carry it in ``X-API-Key`` (where the
    SDK puts ``TINKER_API_KEY``); without, any key is accepted (a local deployment)."""

    def __init__(self, app: Any, api_key: str | None) -> None:
        super().__init__(app)
        self.api_key = api_key

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        exempt = request.url.path == "/api/v1/healthz"
        if self.api_key and not exempt and request.headers.get("x-api-key") != self.api_key:
            return _error(401, "invalid API key: set TINKER_API_KEY to the key this server was started with")
        return await call_next(request)


def create_app(service: TinkerService, *, api_key: str | None = None) -> Starlette:
    """The ASGI app over ``service``."""
    app = Starlette(
        routes=[_route(path, handler, methods) for path, handler, methods in ROUTES],
        middleware=[Middleware(ApiKeyMiddleware, api_key=api_key)],
    )
    app.state.service = service
    return app
