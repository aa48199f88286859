"""The ``rllm ui`` server: a JSON API over the run store, a metric stream, and the static front end.

    app = create_app("runs/rllm.db")        # any ASGI server; `rllm ui` runs it with uvicorn

Every ``/api/`` route reads the store through :class:`~rllm.store.StoreReader` (read-only connections, so
a training run writing the store is never blocked) in Starlette's thread pool; the metric stream polls it.
Errors are JSON: ``404 {"error": "no run 'x'"}``, ``400 {"error": "..."}`` for a bad query value. Any
other path serves ``rllm/ui/static`` with ``index.html`` as the single-page app's entry. docs/ui.md is
the API reference.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

from rllm.store.reader import STALE_AFTER_S, EpisodeQuery, NotFound, StoreReader
from rllm.store.schema import StoreError

STATIC_DIR = Path(__file__).with_name("static")
DEFAULT_MAX_POINTS = 5_000


class BadQuery(ValueError):
    """A query parameter the API cannot use; the message says which and why."""


class MetricsQuery(BaseModel):
    """``keys``: comma-separated metric names (all when absent); ``after_step``: only points after it;
    ``max_points``: thin each series to about this many points (0 = never)."""

    model_config = ConfigDict(extra="ignore")

    keys: str | None = None
    after_step: int | None = None
    max_points: int = Field(DEFAULT_MAX_POINTS, ge=0)

    @property
    def key_list(self) -> list[str] | None:
        names = [k.strip() for k in (self.keys or "").split(",") if k.strip()]
        return names or None


class PageQuery(BaseModel):
    model_config = ConfigDict(extra="ignore")

    limit: int = Field(100, ge=1, le=1000)
    offset: int = Field(0, ge=0)


class TokensQuery(BaseModel):
    model_config = ConfigDict(extra="ignore")

    trajectory: int = Field(0, ge=0)
    step: int = Field(0, ge=0)


def _query(model: type[BaseModel], request: Request) -> Any:
    try:
        return model.model_validate(dict(request.query_params))
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'query'}: {e['msg']}" for e in exc.errors())
        raise BadQuery(f"bad query parameter: {problems}") from None


def create_app(
    store_path: str | Path,
    *,
    static_dir: Path = STATIC_DIR,
    stale_after_s: float = STALE_AFTER_S,
    poll_s: float = 0.5,
    keepalive_s: float = 10.0,
) -> Starlette:
    """The UI's ASGI app over the store at ``store_path`` (which need not exist yet: no runs).

    ``poll_s`` / ``keepalive_s``: how often the metric stream looks for new points, and how long it stays
    silent before sending a keep-alive comment.
    """
    reader = StoreReader(store_path, stale_after_s=stale_after_s)

    def runs(request: Request) -> Response:
        return JSONResponse({"runs": reader.runs(), "store": str(reader.path)})

    def run(request: Request) -> Response:
        return JSONResponse(reader.run(request.path_params["run_id"]))

    def config(request: Request) -> Response:
        return JSONResponse(reader.config(request.path_params["run_id"]))

    def metrics(request: Request) -> Response:
        q = _query(MetricsQuery, request)
        return JSONResponse(
            reader.metrics(request.path_params["run_id"], q.key_list, q.after_step, q.max_points or None)
        )

    async def metrics_stream(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        q = _query(MetricsQuery, request)
        await run_in_threadpool(reader.status, run_id)  # an unknown run is a 404, not an empty stream
        return StreamingResponse(
            _metric_events(reader, run_id, q, poll_s, keepalive_s),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    def episodes(request: Request) -> Response:
        return JSONResponse(reader.episodes(request.path_params["run_id"], _query(EpisodeQuery, request)))

    def steps(request: Request) -> Response:
        return JSONResponse({"steps": reader.steps(request.path_params["run_id"])})

    def evals(request: Request) -> Response:
        q = _query(PageQuery, request)
        return JSONResponse(reader.evals(request.path_params["run_id"], q.limit, q.offset))

    def episode(request: Request) -> Response:
        return JSONResponse(reader.episode(request.path_params["episode_id"]))

    def tokens(request: Request) -> Response:
        q = _query(TokensQuery, request)
        return JSONResponse(reader.tokens(request.path_params["episode_id"], q.trajectory, q.step))

    def no_route(request: Request) -> Response:
        return JSONResponse({"error": f"no API route {request.url.path}: see docs/ui.md"}, status_code=404)

    routes = [
        Route("/api/runs", runs),
        Route("/api/runs/{run_id}", run),
        Route("/api/runs/{run_id}/config", config),
        Route("/api/runs/{run_id}/metrics", metrics),
        Route("/api/runs/{run_id}/metrics/stream", metrics_stream),
        Route("/api/runs/{run_id}/episodes", episodes),
        Route("/api/runs/{run_id}/steps", steps),
        Route("/api/runs/{run_id}/evals", evals),
        Route("/api/episodes/{episode_id}", episode),
        Route("/api/episodes/{episode_id}/tokens", tokens),
        Route("/api/{rest:path}", no_route),
        Mount("/", _SinglePageApp(static_dir)),
    ]
    app = Starlette(
        routes=routes,
        exception_handlers={
            NotFound: lambda request, exc: JSONResponse({"error": str(exc)}, status_code=404),
            BadQuery: lambda request, exc: JSONResponse({"error": str(exc)}, status_code=400),
            StoreError: lambda request, exc: JSONResponse({"error": str(exc)}, status_code=500),
        },
    )
    app.state.reader = reader
    return app


async def _metric_events(
    reader: StoreReader, run_id: str, q: MetricsQuery, poll_s: float, keepalive_s: float
) -> AsyncIterator[str]:
    """Server-Sent Events: a ``data:`` event with the new points whenever there are any, a comment every
    ``keepalive_s`` of silence, and a final ``event: end`` once the run is no longer running."""
    after, silent_s = q.after_step, 0.0
    while True:
        # Status first: points committed before the run ended are then in the read that follows.
        status = await run_in_threadpool(reader.status, run_id)
        data = await run_in_threadpool(reader.metrics, run_id, q.key_list, after, q.max_points or None)
        if any(data["series"].values()):
            after, silent_s = data["last_step"], 0.0
            yield f"data: {json.dumps(data, allow_nan=False)}\n\n"
        elif silent_s >= keepalive_s:
            silent_s = 0.0
            yield ": keepalive\n\n"
        if status != "running":
            yield f"event: end\ndata: {json.dumps({'status': status})}\n\n"
            return
        await asyncio.sleep(poll_s)
        silent_s += poll_s


class _SinglePageApp(StaticFiles):
    """The front end's files; a path that is not a file gets ``index.html`` (the app routes by hash, but
    a reload of a deep link must not 404)."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory=directory, html=True, check_dir=False)
        self.index = directory / "index.html"

    async def check_config(self) -> None:
        if self.index.parent.is_dir():  # no front end at all: get_response says so instead
            await super().check_config()

    async def get_response(self, path: str, scope: Scope) -> Response:
        try:
            return await super().get_response(path, scope)
        except HTTPException as exc:
            if exc.status_code != 404:
                raise
        if self.index.is_file():
            return await super().get_response("index.html", scope)
        return HTMLResponse(
            "<h1>rllm ui</h1><p>The front end is not installed (no rllm/ui/static/index.html); the JSON API is at "
            "<a href='/api/runs'>/api/runs</a>.</p>",
            status_code=200,
        )
