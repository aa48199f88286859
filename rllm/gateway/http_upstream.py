"""HTTP upstreams: vLLM, SGLang or any OpenAI-compatible server, behind one or more worker URLs.

For every call the gateway asks the upstream for what training needs, in that engine's own dialect:

- **vLLM**: ``return_token_ids: true`` (prompt ids at the top level, completion ids per choice) and
  ``logprobs`` (per-token logprobs of the sampled tokens);
- **SGLang**: ``return_prompt_token_ids: true`` and ``logprobs: true`` (each logprob entry carries its
  ``token_id``);
- **openai**: any other OpenAI-compatible server. It returns text (and at best logprobs) but no token ids,
  so its traces are stored with ``trainable=false``: they document the run but are never trained on.

The client never sees these extra fields: the gateway builds its reply from the parsed choices.

Tools are passed through: the server renders them with the model's chat template and parses calls with its
own tool parser (vLLM needs ``--enable-auto-tool-choice --tool-call-parser NAME``; without it vLLM refuses
any ``tool_choice`` but ``"none"`` with a 400, which the client gets). Where vLLM holds the calls to a
grammar (a forced ``tool_choice``: ``"required"`` or a named function; or ``auto`` with a ``strict`` tool or
``parallel_tool_calls: false``), the tokens of the text the request fixed (the call format's literal
pieces and the name; ``rllm.gateway.vllm_forcing`` says which) are recorded as not sampled
(``completion_mask`` 0), as the local engine records its forced tokens. ``response_format`` and ``strict``
are passed through too (vLLM samples under its own structured-outputs grammar); a reply under a JSON
``response_format`` is recorded with every token not sampled (mask 0), since which tokens the server's
grammar forced is not known here. A JSON ``response_format`` with a forced ``tool_choice``, which vLLM would
silently drop, is refused with a 400 (as the local engine refuses it). docs/gateway.md ("Who constrains
what, on each upstream") lists what vLLM holds to a schema and what it does not.

Routing: a session sticks to the worker that served its first call (its prefix cache stays warm for the
next turn); a new session, or one whose worker is down, goes to the least-loaded healthy worker.
Connection errors, 5xx answers and calls that get no answer within ``timeout_s`` (a server that accepted
the request and hangs) are retried, up to ``retries`` times: on another worker while there is one not yet
tried for the call (the session then sticks to that one; the call is counted in ``rerouted``), else on one
already tried (a one-server upstream retries a transient 5xx on the same server). Every retry is counted
in ``retried``. A worker whose connection failed or timed out is marked unhealthy and skipped until the
background health check (every ``health_interval_s``) sees its ``/health`` answer 200 again. A worker
the owner ``retire``s (e.g. one that missed a weight sync) is never routed to again.

**Policy.** The upstream names the model every call asks for (``model``: the served base model, or a LoRA
adapter loaded into every worker) and the ``weight_version`` those weights are; :meth:`set_policy` switches
both at once (the gateway's ``POST /admin/policy`` calls it), and each result records the version of the
model name its request was sent with. With several adapters (``adapters``: adapter name -> the model name
the workers serve it under, e.g. ``{"solver": "solver-v3"}``), a request for adapter ``solver`` asks for
``solver-v3``; ``set_policy`` replaces that map together with the version.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp

from rllm.gateway.upstreams import UpstreamChoice, UpstreamError, UpstreamRequest, UpstreamResult
from rllm.gateway.vllm_forcing import forced_reply_mask, tool_grammar
from rllm.inference.base import SamplingParams

logger = logging.getLogger(__name__)

Kind = Literal["vllm", "sglang", "openai"]
# Connection-level failures: the request may not have reached the worker, so another may serve it.
_RETRYABLE = (aiohttp.ClientConnectionError, asyncio.TimeoutError)


@dataclass
class Worker:
    """One upstream server. ``base_url`` ends in ``/v1``; ``root`` is the server root (health, version)."""

    base_url: str
    inflight: int = 0
    healthy: bool = True
    served: int = 0
    failures: int = 0
    last_error: str | None = None
    retired: bool = False  # taken out of the pool by its owner: never routed to, whatever its health

    @property
    def root(self) -> str:
        return self.base_url.removesuffix("/").removesuffix("/v1")


def _tool_grammar(request: UpstreamRequest) -> str | None:
    """How vLLM holds this call's tool calls to a grammar (``rllm.gateway.vllm_forcing.tool_grammar``)."""
    if request.endpoint != "chat.completions":
        return None
    return tool_grammar(request.tools, request.tool_choice, request.parallel_tool_calls)


def _structured(request: UpstreamRequest) -> bool:
    """Whether the reply is held to a JSON ``response_format`` (``json_object`` / ``json_schema``)."""
    return (request.response_format or {}).get("type", "text") != "text"


def _base_url(url: str) -> str:
    url = url.rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"upstream URL {url!r} must start with http:// or https://")
    return url if url.endswith("/v1") else url + "/v1"


class HTTPUpstream:
    """Forwards calls to OpenAI-compatible servers of one ``kind`` (``auto`` detects it at start)."""

    def __init__(
        self,
        urls: list[str],
        *,
        kind: Kind | Literal["auto"] = "auto",
        model: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 600.0,
        retries: int = 2,
        health_interval_s: float = 5.0,
        max_sticky_sessions: int = 100_000,
        weight_version: int = 0,
        adapters: dict[str, str] | None = None,
    ) -> None:
        if not urls:
            raise ValueError("HTTPUpstream needs at least one upstream URL")
        if not timeout_s > 0:  # also refuses NaN
            raise ValueError(
                f"the upstream call timeout must be a positive number of seconds, not {timeout_s!r}"
            )
        if retries < 0:
            raise ValueError(f"upstream retries must be >= 0, not {retries}")
        self.workers = [Worker(_base_url(u)) for u in urls]
        self.kind: Kind | Literal["auto"] = kind
        self.model = model
        self.weight_version = weight_version
        self.adapters: dict[str, str] = dict(adapters or {})  # adapter name -> served model name
        self.rerouted = 0  # calls served by another worker after the one they were sent to failed
        self.retried = 0  # attempts after a failed one (a 5xx, a connection error, a time-out), any worker
        self.retries = retries
        self.health_interval_s = health_interval_s
        self.max_sticky_sessions = max_sticky_sessions
        self._sticky: OrderedDict[str, Worker] = OrderedDict()
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout_s = timeout_s
        # aiohttp, not httpx: httpx's connection pool walks every pooled connection on each request, which
        # dominated the gateway's CPU at 64+ concurrent sessions. Created on first use, inside the loop.
        self._session: aiohttp.ClientSession | None = None
        self._fresh_session: aiohttp.ClientSession | None = None
        self._health_task: asyncio.Task | None = None
        self._started = False
        self._start_lock: asyncio.Lock | None = None

    @property
    def name(self) -> str:
        return f"{self.kind}:{','.join(w.base_url for w in self.workers)}"

    @property
    def trainable(self) -> bool:
        return self.kind in ("vllm", "sglang")

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                headers=self._headers,
                timeout=aiohttp.ClientTimeout(total=self._timeout_s),
                # Idle connections are dropped after 4 s, before the servers' own keep-alive timeout (uvicorn's
                # default 5 s, which vLLM and SGLang use) closes them under a request that reuses one.
                connector=aiohttp.TCPConnector(limit=1024, limit_per_host=0, keepalive_timeout=4.0),
            )
        return self._session

    def _fresh_http(self) -> aiohttp.ClientSession:
        """A session that never reuses a connection: the retry of a call whose pooled connection failed."""
        if self._fresh_session is None:
            self._fresh_session = aiohttp.ClientSession(
                headers=self._headers,
                timeout=aiohttp.ClientTimeout(total=self._timeout_s),
                connector=aiohttp.TCPConnector(force_close=True),
            )
        return self._fresh_session

    async def _post(self, w: Worker, path: str, payload: bytes) -> tuple[int, bytes]:
        """POST to one worker. A connection-level failure is retried once on a fresh connection before the
        worker is blamed: a pooled keep-alive connection the server closed just as it was reused fails
        like a dead server (a one-server training run lost 60 of its 2,048 episodes to "Cannot write request
        body" before this). A time-out is not retried here: the worker did not answer in time."""
        headers = {"Content-Type": "application/json"}
        try:
            async with self._http().post(w.base_url + path, data=payload, headers=headers) as resp:
                return resp.status, await resp.read()
        except aiohttp.ClientConnectionError as exc:
            if isinstance(exc, asyncio.TimeoutError):
                raise
            async with self._fresh_http().post(w.base_url + path, data=payload, headers=headers) as resp:
                return resp.status, await resp.read()

    async def _get(self, url: str, timeout_s: float) -> tuple[int, Any]:
        async with self._http().get(url, timeout=aiohttp.ClientTimeout(total=timeout_s)) as r:
            body = await r.read()
            try:
                return r.status, json.loads(body)
            except ValueError:
                return r.status, None

    # ------------------------------------------------------------------ start-up
    async def start(self) -> None:
        """Detect the kind and the served model from the first worker that answers; start health checks."""
        if self._started:
            return
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if self._started:
                return
            errors = []
            for w in self.workers:
                try:
                    if self.kind == "auto":
                        self.kind = await self._detect_kind(w)
                    if self.model is None:
                        status, data = await self._get(f"{w.base_url}/models", 10)
                        if status != 200:
                            raise ValueError(f"GET /models answered {status}")
                        self.model = data["data"][0]["id"]
                    break
                except (
                    aiohttp.ClientError,
                    asyncio.TimeoutError,
                    KeyError,
                    IndexError,
                    TypeError,
                    ValueError,
                ) as exc:
                    errors.append(f"{w.base_url}: {type(exc).__name__}: {exc}")
                    w.healthy = False
            else:
                raise UpstreamError(503, "no upstream worker answered: " + "; ".join(errors))
            if not self.trainable:
                logger.warning(
                    "upstream %s is a plain OpenAI-compatible server: it returns no token ids, so "
                    "its traces are stored as not trainable",
                    self.name,
                )
            self._health_task = asyncio.get_running_loop().create_task(self._health_loop())
            self._started = True

    async def _detect_kind(self, w: Worker) -> Kind:
        status, data = await self._get(f"{w.root}/version", 10)
        if status == 200 and isinstance(data, dict) and "version" in data:
            return "vllm"
        status, _ = await self._get(f"{w.root}/get_model_info", 10)
        return "sglang" if status == 200 else "openai"

    async def _health_loop(self) -> None:
        while True:
            await asyncio.sleep(self.health_interval_s)
            await asyncio.gather(*(self.check(w) for w in self.workers))

    def set_policy(
        self, model: str | None, weight_version: int, adapters: dict[str, str] | None = None
    ) -> None:
        """Ask for ``model`` (a served model or adapter name; None: keep the current one) from now on, and
        for adapter ``a`` the served name ``adapters[a]`` (None: keep the current map), and record results
        as ``weight_version``. Calls already sent keep the name and version they went out with."""
        if model is not None:
            self.model = model
        if adapters is not None:
            self.adapters = dict(adapters)
        self.weight_version = weight_version

    def retire(self, url: str) -> None:
        """Take the worker at ``url`` out of the pool for good (it missed a weight sync: what it serves would
        be recorded under a version it does not hold)."""
        for w in self.workers:
            if w.base_url == _base_url(url):
                w.retired, w.healthy = True, False
                return
        raise ValueError(f"no upstream worker {url!r}")

    def metrics(self) -> dict[str, float]:
        """Pool counters (cumulative since start): workers healthy, calls re-routed after a failure, worker
        failures (connection errors and 5xx answers), workers retired."""
        return {
            "pool/servers": float(len(self.workers)),
            "pool/servers_healthy": float(sum(w.healthy and not w.retired for w in self.workers)),
            "pool/servers_retired": float(sum(w.retired for w in self.workers)),
            "pool/calls_rerouted": float(self.rerouted),
            "pool/calls_retried": float(self.retried),
            "pool/worker_failures": float(sum(w.failures for w in self.workers)),
            "pool/weight_version": float(self.weight_version),
        }

    async def check(self, w: Worker) -> bool:
        """Probe one worker (``/health`` of vLLM/SGLang, ``/v1/models`` elsewhere); update its state."""
        if w.retired:
            return False
        url = f"{w.root}/health" if self.kind in ("vllm", "sglang") else f"{w.base_url}/models"
        try:
            ok = (await self._get(url, 5))[0] == 200
            w.last_error = None if ok else f"health check {url} answered non-200"
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            ok, w.last_error = False, f"{type(exc).__name__}: {exc}"
        if ok != w.healthy:
            logger.warning("upstream worker %s is now %s", w.base_url, "healthy" if ok else "unhealthy")
        w.healthy = ok
        return ok

    # ------------------------------------------------------------------ routing
    def pick(self, session_id: str, exclude: set[str] = frozenset()) -> Worker | None:  # type: ignore[assignment]
        """The session's sticky worker if it is healthy, else the least-loaded healthy one (which then
        becomes sticky). None when no worker outside ``exclude`` is healthy."""
        w = self._sticky.get(session_id)
        if w is not None and w.healthy and not w.retired and w.base_url not in exclude:
            self._sticky.move_to_end(session_id)
            return w
        live = [w for w in self.workers if not w.retired and w.base_url not in exclude]
        candidates = [w for w in live if w.healthy]
        if not candidates:  # every worker failed a check: try the unhealthy ones rather than give up
            candidates = live
        if not candidates:
            return None
        w = min(candidates, key=lambda w: (w.inflight, w.served))
        self._sticky[session_id] = w
        if len(self._sticky) > self.max_sticky_sessions:
            self._sticky.popitem(last=False)
        return w

    # ------------------------------------------------------------------ calls
    async def complete(self, request: UpstreamRequest, *, session_id: str) -> UpstreamResult:
        await self.start()
        # Name and version are read together, before any await: the result is recorded under the version
        # of the weights its request asked for, even if the policy switches while it runs.
        version = self.weight_version
        payload = json.dumps(self.request_body(request)).encode()
        path = "/chat/completions" if request.endpoint == "chat.completions" else "/completions"
        tried: set[str] = set()
        last = "no worker tried"
        for attempt in range(self.retries + 1):
            w = self.pick(session_id, tried)
            if w is None and tried:  # every worker tried once: try again rather than fail a transient error
                w = self.pick(session_id)
            if w is None:
                break
            if attempt:
                self.retried += 1
                self.rerouted += w.base_url not in tried
            tried.add(w.base_url)
            w.inflight += 1
            try:
                status, raw = await self._post(w, path, payload)
            except _RETRYABLE as exc:
                w.healthy, w.failures = False, w.failures + 1
                last = w.last_error = f"{w.base_url}: {type(exc).__name__}: {exc}"
                logger.warning("upstream call failed, retrying on another worker: %s", last)
                continue
            finally:
                w.inflight -= 1
            if status >= 500:
                w.failures += 1
                last = f"{w.base_url} answered {status}: {raw[:500].decode(errors='replace')}"
                continue
            if status >= 400:
                raise UpstreamError(status, f"the upstream refused the request: {_error_text(raw)}")
            try:
                data = json.loads(raw)
            except ValueError as exc:
                raise UpstreamError(502, f"the upstream reply is not JSON: {raw[:200]!r}") from exc
            w.served += 1
            result = self.parse_response(data, request, upstream=w.base_url)
            result.weight_version = version
            return result
        raise UpstreamError(502, f"no upstream worker could serve the request ({last})")

    def _engine_sampling(self, p: SamplingParams) -> dict[str, Any]:
        """The sampling fields vLLM and SGLang take beyond the OpenAI API (refused for a plain OpenAI
        upstream, which would ignore or reject them)."""
        extra: dict[str, Any] = {}
        if p.top_k:
            extra["top_k"] = p.top_k
        if p.stop_token_ids:
            extra["stop_token_ids"] = p.stop_token_ids
        if extra and self.kind == "openai":
            raise UpstreamError(
                400, f"{', '.join(extra)} is not part of the OpenAI API this upstream speaks: drop it"
            )
        if p.ignore_eos:
            extra["ignore_eos"] = True
        return extra

    def request_body(self, request: UpstreamRequest) -> dict[str, Any]:
        """The upstream request: the client's request with the session's sampling, plus the fields this
        kind of engine needs to return token ids and logprobs."""
        p = request.params
        model = self.model
        if request.adapter is not None:
            model = self.adapters.get(request.adapter)
            if model is None:
                loaded = ", ".join(sorted(self.adapters)) or "none"
                raise UpstreamError(
                    400, f"unknown adapter {request.adapter!r}: the servers have loaded {loaded}"
                )
        body: dict[str, Any] = {
            "model": model,
            "n": p.n,
            "temperature": p.temperature,
            "top_p": p.top_p,
            "max_tokens": p.max_tokens,
            "stream": False,
        }
        if p.stop:
            body["stop"] = p.stop
        if p.seed is not None:
            body["seed"] = p.seed
        body.update(self._engine_sampling(p))
        if request.endpoint == "chat.completions":
            body.update(self._chat_fields(request))
        else:
            body["prompt"] = request.prompt
            body["logprobs"] = 1 if self.kind == "openai" else 0
        if self.kind == "vllm":
            body["return_token_ids"] = True
            # Keep the eos/stop tokens in the ids and the text decision ours to match the local engine.
            body["skip_special_tokens"] = True
        elif self.kind == "sglang":
            body["return_prompt_token_ids"] = True
        return body

    def _chat_fields(self, request: UpstreamRequest) -> dict[str, Any]:
        """The chat request's own fields: messages, tools and how the reply is constrained."""
        fields: dict[str, Any] = {"messages": request.messages, "logprobs": True}
        if request.tools:
            fields["tools"] = request.tools
        if request.tool_choice is not None:
            fields["tool_choice"] = request.tool_choice
        if request.parallel_tool_calls is not None:
            fields["parallel_tool_calls"] = request.parallel_tool_calls
        if request.response_format is not None:
            if self.kind == "vllm" and _structured(request) and _tool_grammar(request) == "forced":
                # vLLM would drop the response_format ("structured outputs are ignored because
                # tool_choice forces tool call"): refused, as the local engine refuses it.
                raise UpstreamError(
                    400,
                    "response_format cannot be combined with a forced tool_choice (the reply is a tool "
                    "call): send one of them, or tool_choice 'auto'",
                )
            fields["response_format"] = request.response_format
        return fields

    def parse_response(
        self, data: dict[str, Any], request: UpstreamRequest, *, upstream: str
    ) -> UpstreamResult:
        """Read the token ids and logprobs out of an upstream reply (each kind puts them elsewhere)."""
        try:
            raw_choices = sorted(data["choices"], key=lambda c: c.get("index", 0))
        except (KeyError, TypeError) as exc:
            raise UpstreamError(502, f"the upstream reply has no choices: {str(data)[:300]}") from exc
        prompt_ids = data.get("prompt_token_ids") or (
            raw_choices[0].get("prompt_token_ids") if raw_choices else None
        )
        choices, trainable = [], self.trainable and prompt_ids is not None
        # Under a tool-call grammar vLLM forces the call's literal pieces; which tokens those are is read
        # from the reply (rllm.gateway.vllm_forcing).
        forced = self.kind == "vllm" and _tool_grammar(request) is not None
        # Under response_format the server samples under its own grammar: which tokens it forced is not
        # known here and its logprobs are renormalised over the allowed ones, so none is trained on.
        structured = _structured(request)
        for c in raw_choices:
            ids, lps, strings = _token_ids_and_logprobs(c, request.endpoint)
            if ids is None or lps is None or len(ids) != len(lps):
                trainable = False
            if request.endpoint == "chat.completions":
                msg = c.get("message") or {}
                text, tool_calls = msg.get("content") or "", msg.get("tool_calls") or None
            else:
                text, tool_calls = c.get("text") or "", None
            choices.append(
                UpstreamChoice(
                    text=text,
                    tool_calls=tool_calls,
                    finish_reason=c.get("finish_reason") or "stop",
                    completion_ids=ids or [],
                    logprobs=lps or [],
                    completion_mask=(
                        [0] * len(ids)
                        if structured and ids
                        else forced_reply_mask(
                            strings,
                            len(ids),
                            request.tools or [],
                            request.tool_choice,
                            request.parallel_tool_calls,
                        )
                        if forced and ids
                        else None
                    ),
                    token_strings=strings if request.logprobs else None,
                    stop_sequence=_stop_sequence(c, request.params.stop),
                )
            )
        if not trainable:
            for ch in choices:  # keep the record honest: no half-filled token lists
                ch.completion_ids, ch.logprobs, ch.completion_mask = [], [], None
            prompt_ids = []
        return UpstreamResult(
            prompt_ids=list(prompt_ids or []), choices=choices, trainable=trainable, upstream=upstream
        )

    async def count_tokens(self, request: UpstreamRequest, *, session_id: str) -> int:
        """The prompt length of a chat ``request`` as the server renders it (vLLM's ``POST /tokenize``,
        the same chat template its chat completions use); other kinds cannot say, a 400."""
        await self.start()
        if self.kind != "vllm":
            raise UpstreamError(
                400, f"counting tokens needs a vLLM upstream or the local engine, not a {self.kind} server"
            )
        body: dict[str, Any] = {
            "model": self.model,
            "messages": request.messages,
            "add_generation_prompt": True,
        }
        if request.tools:
            body["tools"] = request.tools
        w = self.pick(session_id)
        if w is None:
            raise UpstreamError(502, "no upstream worker is healthy enough to count tokens")
        try:
            async with self._http().post(f"{w.root}/tokenize", json=body) as resp:
                status, raw = resp.status, await resp.read()
        except _RETRYABLE as exc:
            raise UpstreamError(502, f"{w.base_url}: {type(exc).__name__}: {exc}") from exc
        if status != 200:
            raise UpstreamError(
                status if 400 <= status < 500 else 502,
                f"the upstream could not count the tokens: {_error_text(raw)}",
            )
        try:
            return int(json.loads(raw)["count"])
        except (ValueError, KeyError, TypeError) as exc:
            raise UpstreamError(502, f"the upstream's /tokenize reply has no count: {raw[:200]!r}") from exc

    async def health(self) -> dict[str, Any]:
        return {
            "ok": any(w.healthy and not w.retired for w in self.workers),
            "kind": self.kind,
            "model": self.model,
            "adapters": self.adapters,
            "weight_version": self.weight_version,
            "calls_rerouted": self.rerouted,
            "calls_retried": self.retried,
            "workers": [
                {
                    "url": w.base_url,
                    "healthy": w.healthy,
                    "retired": w.retired,
                    "inflight": w.inflight,
                    "served": w.served,
                    "failures": w.failures,
                    "last_error": w.last_error,
                }
                for w in self.workers
            ],
        }

    async def aclose(self) -> None:
        if self._health_task is not None:
            self._health_task.cancel()
        for session in (self._session, self._fresh_session):
            if session is not None:
                await session.close()


def _token_ids_and_logprobs(
    choice: dict[str, Any], endpoint: str
) -> tuple[list[int] | None, list[float] | None, list[str] | None]:
    """Completion token ids, their logprobs and token strings from one upstream choice, wherever the
    engine put them (vLLM: ``token_ids``; SGLang: ``logprobs.content[i].token_id``)."""
    ids = choice.get("token_ids")
    lp = choice.get("logprobs") or {}
    lps = strings = None
    if endpoint == "chat.completions":
        content = lp.get("content")
        if content is not None:
            lps = [float(e["logprob"]) for e in content]
            strings = [e.get("token", "") for e in content]
            if ids is None and content and all("token_id" in e for e in content):
                ids = [int(e["token_id"]) for e in content]
    else:
        if lp.get("token_logprobs") is not None:
            lps = [float(x) if x is not None else float("-inf") for x in lp["token_logprobs"]]
            strings = lp.get("tokens")
    return (list(ids) if ids is not None else None), lps, strings


def _stop_sequence(choice: dict[str, Any], stop: list[str]) -> str | None:
    """The client stop string that ended an upstream choice (vLLM: ``stop_reason``; SGLang:
    ``matched_stop``); ``None`` for an eos, a stop token id, or a server that does not say."""
    for key in ("stop_reason", "matched_stop"):
        value = choice.get(key)
        if isinstance(value, str) and value in stop:
            return value
    return None


def _error_text(raw: bytes) -> str:
    try:
        data = json.loads(raw)
        err = data.get("error") or data if isinstance(data, dict) else data
        return str(err.get("message", err)) if isinstance(err, dict) else str(err)
    except ValueError:
        return raw[:500].decode(errors="replace")
