"""Start and stop a local vLLM OpenAI-compatible server (the CPU build) from another venv.

vLLM pins its own torch and transformers, so it lives in a venv of its own (``scripts/setup_vllm.sh``
makes one, by default ``.venv-vllm`` in the repository) and rllm never imports it: ``VLLMServer`` runs
``python -m vllm.entrypoints.openai.api_server`` with that venv's Python as a child process, waits for
its ``/health`` endpoint and stops the whole process group on exit. It uses only the standard library
and httpx, so it works from rllm's own venv. Typical use (tests, benchmarks, the gateway's vLLM
backend)::

    with VLLMServer(resolve_model("smollm2-135m")) as server:
        openai.OpenAI(base_url=server.base_url, api_key="x").completions.create(
            model=server.served_model_name, prompt="Hi", max_tokens=8)

On CPU, vLLM needs a few environment variables (see ``cpu_env``); docs/vllm_notes.md lists the
request fields that return token ids and logprobs.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING

import httpx

if TYPE_CHECKING:
    from typing_extensions import Self

logger = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_VENV = REPO_ROOT / ".venv-vllm"


def default_vllm_python() -> Path:
    """The Python of the vLLM venv: ``$RLLM_VLLM_VENV/bin/python``, else ``<repo>/.venv-vllm/bin/python``
    (the same default as ``scripts/setup_vllm.sh``)."""
    venv = os.environ.get("RLLM_VLLM_VENV")
    root = Path(venv) if venv else DEFAULT_VENV
    if not root.is_absolute():
        root = REPO_ROOT / root
    return root / "bin" / "python"


def cpu_list(cpus: Sequence[int]) -> str:
    """Format CPU ids compactly the way ``VLLM_CPU_OMP_THREADS_BIND`` reads them: ``0-3,6``."""
    runs: list[list[int]] = []
    for cpu in sorted(set(cpus)):
        if runs and cpu == runs[-1][1] + 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def cpu_env(kvcache_space_gib: int = 2) -> dict[str, str]:
    """Environment vLLM's CPU build needs to start reliably.

    - ``VLLM_CPU_OMP_THREADS_BIND``: bind the OpenMP threads to the CPUs this process may use (the
      default ``auto`` reserves a core and reads NUMA data, which fails on small VMs and containers).
    - ``VLLM_CPU_NUM_OF_RESERVED_CPU=0``: do not keep a core back for the frontend.
    - ``VLLM_CPU_KVCACHE_SPACE``: KV cache size in GiB (vLLM's default takes a share of the host's RAM).

    Values already in ``os.environ`` win, so a user can override any of them.
    """
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = list(range(os.cpu_count() or 1))
    env = {
        "VLLM_CPU_OMP_THREADS_BIND": cpu_list(cpus),
        "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
        "VLLM_CPU_KVCACHE_SPACE": str(kvcache_space_gib),
    }
    return {key: os.environ.get(key, value) for key, value in env.items()}


def split_cpus(num_servers: int) -> list[str] | None:
    """CPU build: disjoint ``VLLM_CPU_OMP_THREADS_BIND`` sets, one per server on this host (servers sharing
    every core would each spin OpenMP threads on all of them); None when there is one server, fewer CPUs
    than servers, or the user set the variable."""
    if num_servers < 2 or "VLLM_CPU_OMP_THREADS_BIND" in os.environ:
        return None
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return None
    if len(cpus) < num_servers:
        return None
    per = len(cpus) // num_servers
    return [cpu_list(cpus[i * per : (i + 1) * per]) for i in range(num_servers)]


def is_cpu_build(python: str | os.PathLike[str]) -> bool:
    """Whether the venv of ``python`` holds vLLM's CPU build (the ``vllm-cpu`` distribution)."""
    root = Path(python).parent.parent
    return any(root.glob("lib/python*/site-packages/vllm_cpu-*.dist-info"))


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to process group ``pgid``; False when no process of the group is left."""
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


class VLLMServerError(RuntimeError):
    """The vLLM server could not be started (missing venv, crash during start-up, or time-out)."""


class VLLMWeightsError(RuntimeError):
    """A running vLLM server refused or failed a weight update (adapter load/unload, weight reload)."""


class VLLMUnreachableError(VLLMWeightsError):
    """The server did not accept a connection, or dropped it without answering: it is down."""


# vLLM accepts only these --max-lora-rank values (vllm.config.lora.MaxLoRARanks in 0.32).
MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def max_lora_rank_for(rank: int) -> int:
    """The smallest ``--max-lora-rank`` vLLM accepts that holds adapters of ``rank``."""
    for r in MAX_LORA_RANKS:
        if r >= rank:
            return r
    raise ValueError(
        f"LoRA rank {rank} is above the largest --max-lora-rank vLLM accepts ({MAX_LORA_RANKS[-1]})"
    )


def _post(
    url: str, body: dict | None, *, timeout_s: float, what: str, params: dict | None = None
) -> httpx.Response:
    try:
        with httpx.Client(timeout=timeout_s, trust_env=False) as client:
            resp = client.post(url, json=body, params=params)
    except (httpx.ConnectError, httpx.RemoteProtocolError) as exc:
        raise VLLMUnreachableError(f"{what}: {url} unreachable ({type(exc).__name__}: {exc})") from exc
    except httpx.HTTPError as exc:
        raise VLLMWeightsError(f"{what}: {url} failed ({type(exc).__name__}: {exc})") from exc
    if resp.status_code != 200:
        raise VLLMWeightsError(f"{what}: {url} answered {resp.status_code}: {_error_message(resp)}")
    return resp


def _error_message(resp: httpx.Response) -> str:
    try:
        data = resp.json()
        err = data.get("error", data) if isinstance(data, dict) else data
        return str(err.get("message", err) if isinstance(err, dict) else err)[:500]
    except ValueError:
        return resp.text[:500]


def load_lora_adapter(url: str, name: str, path: str | os.PathLike[str], *, timeout_s: float = 120.0) -> None:
    """Load the PEFT adapter directory ``path`` into the server at ``url`` (its root) as model ``name``.

    Needs a server started with ``--enable-lora`` and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`` (else the
    route is a 404). vLLM checks the adapter's rank against ``--max-lora-rank`` here."""
    _post(
        f"{url}/v1/load_lora_adapter",
        {"lora_name": name, "lora_path": str(path)},
        timeout_s=timeout_s,
        what=f"loading LoRA adapter {name!r} from {path}",
    )


def unload_lora_adapter(url: str, name: str, *, timeout_s: float = 60.0) -> None:
    """Unload the adapter served as ``name`` from the server at ``url``."""
    _post(
        f"{url}/v1/unload_lora_adapter",
        {"lora_name": name},
        timeout_s=timeout_s,
        what=f"unloading LoRA adapter {name!r}",
    )


def reload_weights(url: str, model_dir: str | os.PathLike[str], *, timeout_s: float = 600.0) -> None:
    """Replace the weights of the server at ``url`` in place with the Hugging Face checkpoint in
    ``model_dir`` (same architecture and names), then drop its prefix cache (computed with the old weights).

    Uses vLLM's development routes (a server started with ``VLLM_SERVER_DEV_MODE=1``): ``/pause`` (mode
    ``wait``: running requests finish first), ``/collective_rpc`` calling every worker's ``reload_weights``
    with ``weights_path``, ``/reset_prefix_cache``, ``/resume``. The server resumes even when the reload
    failed, and the error is raised."""
    what = f"reloading weights from {model_dir}"
    _post(f"{url}/pause", None, params={"mode": "wait"}, timeout_s=timeout_s, what=what)
    try:
        _post(
            f"{url}/collective_rpc",
            {"method": "reload_weights", "kwargs": {"weights_path": str(model_dir)}, "timeout": timeout_s},
            timeout_s=timeout_s,
            what=what,
        )
        _post(f"{url}/reset_prefix_cache", None, timeout_s=60.0, what=what)
    finally:
        _post(f"{url}/resume", None, timeout_s=60.0, what=what)


class VLLMServer:
    """A vLLM OpenAI-compatible server in a child process, for the lifetime of a ``with`` block.

    ``model`` is a local Hugging Face model directory (e.g. ``resolve_model("smollm2-135m")``), served
    as ``served_model_name`` (default: the directory's name) on ``host`` and a free port. ``start``
    blocks until ``/health`` answers 200, or raises ``VLLMServerError`` with the tail of the log. The
    defaults are chosen for RL on CPU:

    - ``dtype="float32"``: vLLM's ``auto`` runs float32 checkpoints in half precision; float32 keeps
      the reported logprobs within ~5e-5 of a float32 trainer's.
    - ``logprobs_mode="processed_logprobs"``: reported logprobs are log_softmax(logits / temperature)
      after top-k/top-p (renormalized), i.e. of the distribution the token was sampled from. vLLM's
      default ``raw_logprobs`` reports log_softmax(logits), ignoring the temperature.
    - ``generation_config="vllm"``: fields a request leaves out get vLLM's neutral defaults
      (temperature 1, no top-k/top-p), not the model's ``generation_config.json`` ones (vLLM's default
      ``auto``), so the request alone decides the sampling; that file's eos ids still apply.
    - ``enforce_eager=True``: skips torch.compile, whose warm-up takes ~100 s on 2 cores (start in
      ~40-70 s instead of ~140-175 s) for no measurable speed-up on small models.

    For RL weight sync: ``enable_lora`` adds ``--enable-lora --max-lora-rank R --max-loras N`` and
    ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`` (adapters hot-loaded with :meth:`load_adapter`; ``max_loras``
    defaults to 2 so the next version loads while the current one still serves); ``dev_mode`` sets
    ``VLLM_SERVER_DEV_MODE=1`` (the routes :meth:`reload_weights` uses for a full fine-tune).
    ``tensor_parallel_size`` and ``gpu_memory_utilization`` are passed through when set (GPU servers).

    Tools: ``tool_call_parser`` (e.g. ``"hermes"`` for ``<tool_call>`` JSON) adds
    ``--enable-auto-tool-choice --tool-call-parser NAME``. Without it vLLM refuses every request that
    sends ``tools`` with a ``tool_choice`` other than ``"none"`` (``"auto"``, ``"required"`` or a named
    function) with a 400, which the gateway passes on. vLLM renders the tools with the model's own chat
    template: a template that ignores ``tools`` (SmolLM2's) never shows them to the model, and only a
    forced ``tool_choice`` then produces calls.

    ``extra_args`` are appended to the command line (they can override the flags above); ``env``
    adds to the child's environment. The server's output goes to ``log_path`` (default: a temporary
    file, removed on ``stop`` unless the start failed).
    """

    def __init__(
        self,
        model: str | os.PathLike[str],
        *,
        python: str | os.PathLike[str] | None = None,
        served_model_name: str | None = None,
        tokenizer: str | os.PathLike[str] | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
        max_model_len: int = 2048,
        dtype: str = "float32",
        logprobs_mode: str | None = "processed_logprobs",
        generation_config: str | None = "vllm",
        enforce_eager: bool = True,
        max_logprobs: int | None = None,
        seed: int | None = None,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float | None = None,
        enable_lora: bool = False,
        max_lora_rank: int = 16,
        max_loras: int = 2,
        dev_mode: bool = False,
        tool_call_parser: str | None = None,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        kvcache_space_gib: int = 2,
        startup_timeout: float = 300.0,
        log_path: str | os.PathLike[str] | None = None,
    ) -> None:
        self.model = str(model)
        self.python = Path(python) if python is not None else default_vllm_python()
        self.served_model_name = served_model_name or Path(self.model).name
        self.tokenizer = str(tokenizer) if tokenizer is not None else None  # None: the model directory's
        self.host = host
        self.port = port
        self.max_model_len = max_model_len
        self.dtype = dtype
        self.logprobs_mode = logprobs_mode
        self.generation_config = generation_config
        self.enforce_eager = enforce_eager
        self.max_logprobs = max_logprobs
        self.seed = seed
        self.tensor_parallel_size = tensor_parallel_size
        self.gpu_memory_utilization = gpu_memory_utilization
        self.enable_lora = enable_lora
        if enable_lora and max_lora_rank not in MAX_LORA_RANKS:
            raise ValueError(
                f"max_lora_rank={max_lora_rank} is not one vLLM accepts: use one of {MAX_LORA_RANKS}"
            )
        self.max_lora_rank = max_lora_rank
        self.max_loras = max_loras
        self.dev_mode = dev_mode
        self.tool_call_parser = tool_call_parser
        self.extra_args = list(extra_args)
        self.env = dict(env or {})
        self.kvcache_space_gib = kvcache_space_gib
        self.startup_timeout = startup_timeout
        self.log_path = Path(log_path) if log_path is not None else None
        self._own_log = log_path is None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: IO[bytes] | None = None

    # --- addresses ---------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """The server's root URL, ``http://HOST:PORT`` (``/health``, ``/tokenize`` live here)."""
        if self.port is None:
            raise VLLMServerError("the server has no port yet: call start() first")
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI API base URL, ``http://HOST:PORT/v1``."""
        return f"{self.url}/v1"

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        return self._proc is not None and self._proc.poll() is None

    # --- command -----------------------------------------------------------------------------------
    def command(self) -> list[str]:
        """The command line that starts the server (``port`` must be set)."""
        cmd = [
            str(self.python), "-m", "vllm.entrypoints.openai.api_server",
            "--model", self.model,
            "--served-model-name", self.served_model_name,
            "--host", self.host,
            "--port", str(self.port),
            "--max-model-len", str(self.max_model_len),
            "--dtype", self.dtype,
        ]  # fmt: skip
        if self.tokenizer is not None:
            cmd += ["--tokenizer", self.tokenizer]
        if self.logprobs_mode is not None:
            cmd += ["--logprobs-mode", self.logprobs_mode]
        if self.generation_config is not None:
            cmd += ["--generation-config", self.generation_config]
        if self.enforce_eager:
            cmd.append("--enforce-eager")
        if self.max_logprobs is not None:
            cmd += ["--max-logprobs", str(self.max_logprobs)]
        if self.seed is not None:
            cmd += ["--seed", str(self.seed)]
        if self.tensor_parallel_size != 1:
            cmd += ["--tensor-parallel-size", str(self.tensor_parallel_size)]
        if self.gpu_memory_utilization is not None:
            cmd += ["--gpu-memory-utilization", str(self.gpu_memory_utilization)]
        if self.enable_lora:
            cmd += [
                "--enable-lora",
                "--max-lora-rank",
                str(self.max_lora_rank),
                "--max-loras",
                str(self.max_loras),
            ]
        if self.tool_call_parser is not None:
            cmd += ["--enable-auto-tool-choice", "--tool-call-parser", self.tool_call_parser]
        if is_cpu_build(self.python):
            # vllm-cpu 0.32 crashes its engine ("CPU Generator does not use offset") when a seeded request's
            # prefill is split across steps, which any batch of seeded rollouts longer than one step's token
            # budget does; whole prefills avoid it (and measured 220 vs 188 tok/s at 64 seeded requests here).
            cmd.append("--no-enable-chunked-prefill")
        return cmd + self.extra_args

    def child_env(self) -> dict[str, str]:
        """The server's environment: ours, plus ``cpu_env()``, plus ``env`` given to the constructor."""
        env = dict(os.environ)
        env.update(cpu_env(self.kvcache_space_gib))
        env.setdefault("VLLM_NO_USAGE_STATS", "1")  # no network calls home
        env.setdefault("DO_NOT_TRACK", "1")
        env.setdefault("HF_HUB_OFFLINE", "1")  # the model is a local directory; never ask the hub
        if self.enable_lora:
            env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"  # the /v1/load_lora_adapter route
        if self.dev_mode:
            env["VLLM_SERVER_DEV_MODE"] = "1"  # /pause, /collective_rpc, /reset_prefix_cache, /resume
        env.update(self.env)
        # Our venv's variables must not leak into the vLLM venv's Python.
        env.pop("VIRTUAL_ENV", None)
        env.pop("PYTHONPATH", None)
        env.pop("PYTHONHOME", None)
        return env

    # --- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> Self:
        """Start the server and block until ``/health`` answers; raises ``VLLMServerError`` on failure."""
        if self.running:
            return self
        if not self.python.exists():
            raise VLLMServerError(
                f"no vLLM venv Python at {self.python}: run scripts/setup_vllm.sh "
                "(or set RLLM_VLLM_VENV, or pass python=...)"
            )
        if not Path(self.model).is_dir():
            raise VLLMServerError(f"model directory {self.model} does not exist")
        if self.port is None:
            self.port = free_port(self.host)
        if self.log_path is None:
            fd, name = tempfile.mkstemp(prefix="rllm-vllm-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
        log_file = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self._log_file = log_file
        cmd = self.command()
        logger.info("starting vLLM: %s (log: %s)", " ".join(cmd), self.log_path)
        t0 = time.monotonic()
        self._proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=self.child_env(),
            start_new_session=True,  # its own process group: stop() ends the engine workers too
        )
        try:
            self._wait_healthy(t0)
        except BaseException:
            self._own_log = False  # keep the log for the user to read
            self.stop()
            raise
        logger.info("vLLM is up at %s after %.1fs", self.base_url, time.monotonic() - t0)
        return self

    def _wait_healthy(self, t0: float) -> None:
        assert self._proc is not None
        deadline = t0 + self.startup_timeout
        with httpx.Client(timeout=5.0, trust_env=False) as client:
            while True:
                code = self._proc.poll()
                if code is not None:
                    raise VLLMServerError(
                        f"vLLM exited with code {code} during start-up (log: {self.log_path}):\n"
                        f"{self.log_tail()}"
                    )
                try:
                    if client.get(f"{self.url}/health").status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise VLLMServerError(
                        f"vLLM did not answer {self.url}/health within {self.startup_timeout:.0f}s "
                        f"(log: {self.log_path}):\n{self.log_tail()}"
                    )
                time.sleep(0.5)

    def stop(self, timeout: float = 20.0) -> None:
        """Stop the server's whole process group: SIGTERM, then SIGKILL after ``timeout`` seconds.

        The group also holds vLLM's engine-core process, which may outlive the API process for a
        moment; it gets a few seconds to exit and is killed after that."""
        proc, self._proc = self._proc, None
        if proc is not None:
            pgid = proc.pid  # start_new_session=True: the group id is the leader's pid
            _signal_group(pgid, signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                logger.warning("vLLM did not stop within %.0fs; killing it", timeout)
                _signal_group(pgid, signal.SIGKILL)
                proc.wait(timeout=10)
            deadline = time.monotonic() + 5.0
            while _signal_group(pgid, 0) and time.monotonic() < deadline:
                time.sleep(0.1)
            _signal_group(pgid, signal.SIGKILL)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        if self._own_log and self.log_path is not None:
            self.log_path.unlink(missing_ok=True)
            self.log_path = None

    @property
    def pgid(self) -> int | None:
        """The server's process group id (API server, engine core and workers), while it runs."""
        return self._proc.pid if self._proc is not None else None

    # --- weights (blocking HTTP calls to the running server) -----------------------------------------
    def load_adapter(self, name: str, path: str | os.PathLike[str]) -> None:
        """Hot-load a PEFT adapter directory as model ``name`` (see :func:`load_lora_adapter`)."""
        load_lora_adapter(self.url, name, path)

    def unload_adapter(self, name: str) -> None:
        unload_lora_adapter(self.url, name)

    def reload_weights(self, model_dir: str | os.PathLike[str]) -> None:
        """Replace the served weights with a checkpoint directory (see :func:`reload_weights`)."""
        reload_weights(self.url, model_dir)

    def restart_with(self, model_dir: str | os.PathLike[str]) -> None:
        """Stop the server and start it again on the same port serving the checkpoint in ``model_dir``
        (under the same served model name and tokenizer: an exported checkpoint may carry no tokenizer
        files). Blocking: a full start-up (~40-70 s on 2 CPU cores)."""
        self.stop()
        if self.tokenizer is None:
            self.tokenizer = self.model
        self.model = str(model_dir)
        self.start()

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the server's log ("" when there is none)."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        with open(self.log_path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64_000))
            text = f.read().decode("utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"VLLMServer({self.served_model_name!r}, {self.host}:{self.port}, {state})"
