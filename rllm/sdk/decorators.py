"""``@rllm.rollout`` and ``@rllm.evaluator``: plain functions become an agent flow and its reward."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import weakref
from collections.abc import Callable
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field

from rllm.types import Episode, Outcome, as_outcome


class AgentConfig(BaseModel):
    """What an agent flow gets for one episode. Point any OpenAI client at ``base_url`` with ``model``:
    every call is sampled from the policy being trained and recorded under ``session_id``.

    ``sampling`` tells the flow what the trainer samples with (temperature, top_p, max_tokens, seed); the
    gateway enforces it on every call of the session, whatever the agent sends. For multi-agent flows,
    :meth:`role_url` gives each role (``"solver"``, ``"judge"``) its own session, so its calls form their
    own trajectory with its own reward and advantage group.
    """

    model_config = ConfigDict(extra="forbid")

    base_url: str
    model: str
    session_id: str
    gateway_url: str
    api_key: str = "EMPTY"
    sampling: dict[str, Any] = Field(default_factory=dict)

    def role_url(self, role: str) -> str:
        """The OpenAI base URL of this episode's ``role`` sub-session (``{session_id}:{role}``)."""
        if not role or ":" in role or "/" in role:
            raise ValueError(f"a role name is a non-empty string without ':' or '/', not {role!r}")
        return f"{self.gateway_url}/sessions/{self.session_id}:{role}/v1"

    def client(self, role: str | None = None) -> Any:
        """A sync ``openai.OpenAI`` client for this session (or a role's). Cheap: its connection pool is
        shared by every episode of the process (a new ``openai.OpenAI()`` costs ~35 ms of TLS setup)."""
        import openai

        return openai.OpenAI(
            base_url=self.role_url(role) if role else self.base_url,
            api_key=self.api_key,
            max_retries=0,
            http_client=_shared_http(),
        )

    def async_client(self, role: str | None = None) -> Any:
        """An ``openai.AsyncOpenAI`` client for this session (or a role's), sharing one connection pool per
        event loop. Closing it is harmless."""
        import openai

        return openai.AsyncOpenAI(
            base_url=self.role_url(role) if role else self.base_url,
            api_key=self.api_key,
            max_retries=0,
            http_client=_shared_async_http(),
        )


class _SharedClient(httpx.Client):
    """One connection pool for every episode's sync client: an agent closing "its" client must not end it."""

    def close(self) -> None:
        pass


class _SharedAsyncClient(httpx.AsyncClient):
    """The async counterpart of :class:`_SharedClient` (one per event loop)."""

    async def aclose(self) -> None:
        pass


_LIMITS = httpx.Limits(max_connections=1024, max_keepalive_connections=256)
_SHARED_HTTP: _SharedClient | None = None
# One pool per event loop (the trainer runs on one loop per run; `rllm eval` and other callers may use
# several); dropped with the loop.
_SHARED_ASYNC_HTTP: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _SharedAsyncClient] = (
    weakref.WeakKeyDictionary()
)


def _shared_http() -> _SharedClient:
    global _SHARED_HTTP
    if _SHARED_HTTP is None:
        _SHARED_HTTP = _SharedClient(timeout=600, limits=_LIMITS)
    return _SHARED_HTTP


def _shared_async_http() -> _SharedAsyncClient:
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # made outside a loop: a pool of its own, bound to whichever loop first uses it
        return _SharedAsyncClient(timeout=600, limits=_LIMITS)
    client = _SHARED_ASYNC_HTTP.get(loop)
    if client is None:
        client = _SHARED_ASYNC_HTTP[loop] = _SharedAsyncClient(timeout=600, limits=_LIMITS)
    return client


# Sync flows run on their own threads: the default executor (a few threads on a small machine) would
# serialise hundreds of episodes that spend their time waiting on HTTP.
_SYNC_POOL: concurrent.futures.ThreadPoolExecutor | None = None


def _sync_pool() -> concurrent.futures.ThreadPoolExecutor:
    global _SYNC_POOL
    if _SYNC_POOL is None:
        _SYNC_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=512, thread_name_prefix="rllm-rollout")
    return _SYNC_POOL


async def _call(fn: Callable[..., Any], is_async: bool, *args: Any) -> Any:
    if is_async:
        return await fn(*args)
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_sync_pool(), functools.partial(fn, *args))


class Rollout:
    """An agent flow made by :func:`rollout`. Calling it directly calls the wrapped function."""

    def __init__(self, fn: Callable[..., Any], name: str | None = None) -> None:
        _check_arity(fn, "rollout", "(task, config)")
        self.fn = fn
        self.name = name or fn.__name__
        self.is_async = inspect.iscoroutinefunction(fn)
        functools.update_wrapper(self, fn)

    def __call__(self, task: dict[str, Any], config: AgentConfig) -> Any:
        return self.fn(task, config)

    async def run(self, task: dict[str, Any], config: AgentConfig) -> Any:
        """Run the flow for one episode (a sync flow on a worker thread)."""
        return await _call(self.fn, self.is_async, task, config)


class Evaluator:
    """A reward function made by :func:`evaluator`."""

    def __init__(self, fn: Callable[..., Any], name: str | None = None) -> None:
        _check_arity(fn, "evaluator", "(task, episode)")
        self.fn = fn
        self.name = name or fn.__name__
        self.is_async = inspect.iscoroutinefunction(fn)
        functools.update_wrapper(self, fn)

    def __call__(self, task: dict[str, Any], episode: Episode) -> Any:
        return self.fn(task, episode)

    async def score(self, task: dict[str, Any], episode: Episode) -> Outcome:
        return as_outcome(await _call(self.fn, self.is_async, task, episode), source="an evaluator")


def rollout(fn: Callable[..., Any] | None = None, *, name: str | None = None) -> Any:
    """Decorate ``fn(task, config)`` (sync or async) as an agent flow: ``@rllm.rollout`` or
    ``@rllm.rollout(name="solver")``. The flow may return nothing (an evaluator scores it), a reward
    (float / bool / :class:`~rllm.types.Outcome`), or any value the evaluator reads from
    ``episode.info["output"]``."""
    if fn is None:
        return lambda f: Rollout(f, name)
    return Rollout(fn, name)


def evaluator(fn: Callable[..., Any] | None = None, *, name: str | None = None) -> Any:
    """Decorate ``fn(task, episode)`` (sync or async) as an evaluator returning a reward: a float, a bool,
    an :class:`~rllm.types.Outcome`, or a dict of an Outcome's fields with ``"reward"``."""
    if fn is None:
        return lambda f: Evaluator(f, name)
    return Evaluator(fn, name)


def _check_arity(fn: Callable[..., Any], kind: str, shape: str) -> None:
    if not callable(fn):
        raise TypeError(f"@rllm.{kind} decorates a function {shape}, not {type(fn).__name__}")
    try:
        sig = inspect.signature(fn)
    except ValueError:  # builtins without a signature: let the call fail if they are wrong
        return
    try:
        sig.bind(None, None)
    except TypeError:
        name = getattr(fn, "__name__", type(fn).__name__)
        raise TypeError(f"@rllm.{kind} needs a function taking {shape}; {name}{sig} does not") from None
