"""The Tinker service's state: sessions, trained models and their workers, sampling sessions, futures.

All of it lives on the server's event loop; torch work goes to each model's worker thread
(:mod:`rllm.serve.tinker.worker`) or to the engines' decode threads. Requests that carry a ``seq_id``
(everything a ``TrainingClient`` sends after creating its model) are always queued, even when they are
refused, so that a bad request fails through its own future and never leaves a gap the model's later
requests would wait on; only a request naming no known model is refused over HTTP (404).

Names: a session is ``sess-<hex>``; a trained model ``<session>:train:<n>`` (the id the SDK derives
itself when it creates a model from a checkpoint); a sampling session ``<session>:sample:<n>``; saved
weights ``tinker://<model>/sampler_weights/<name>`` and ``tinker://<model>/weights/<name>`` (training
state, on disk under ``--state-dir``).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rllm.inference.local import LocalEngine
from rllm.serve.tinker.futures import FutureRecord, FutureStore
from rllm.serve.tinker.sampling import SamplerPool, sample
from rllm.serve.tinker.training import (
    TrainedModel,
    TrainSettings,
    adapter_spec,
    read_state_meta,
    target_modules,
)
from rllm.serve.tinker.wire import ForwardBackwardCall
from rllm.serve.tinker.worker import ModelWorker, Operation, RequestError

logger = logging.getLogger(__name__)

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
UNSUPPORTED_MODEL_OPS = {
    "save_weights_external": "exporting weights to an external format is not supported: use save_state",
    "optimizer": "only the Adam optimizer is supported",
}


class ServeError(Exception):
    """A request refused over HTTP, with its status code and a one-line message for the client."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class ServedModel:
    """The one base model this server trains and samples."""

    name: str  # as given to --model (a built-in name or a path)
    path: str  # the resolved Hugging Face model directory: also the tokenizer id the SDK loads
    arch: str
    max_context: int
    linear_kinds: dict[str, str]

    def accepts(self, base_model: str) -> bool:
        return base_model in (self.name, self.path)


@dataclass
class SamplingSession:
    """A sampling client's handle: the weights it samples (None: the base model)."""

    session_id: str
    model_path: str | None
    clients: int = 1


@dataclass
class Session:
    session_id: str
    created: float = field(default_factory=time.time)
    last_heartbeat: float = field(default_factory=time.time)
    finished: bool = False
    models: list[str] = field(default_factory=list)
    ephemeral_samplers: int = 0


@dataclass
class ModelEntry:
    model: TrainedModel
    worker: ModelWorker
    session_id: str


class TinkerService:
    """What the HTTP routes call."""

    def __init__(
        self,
        served: ServedModel,
        settings: TrainSettings,
        base: LocalEngine,
        state_dir: Path,
        *,
        max_samplers: int,
    ) -> None:
        self.served = served
        self.settings = settings
        self.state_dir = state_dir
        self.futures = FutureStore()
        self.samplers = SamplerPool(base, max_per_model=max_samplers)
        self.sessions: dict[str, Session] = {}
        self.models: dict[str, ModelEntry] = {}
        self.sampling_sessions: dict[str, SamplingSession] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    # ------------------------------------------------------------------ sessions
    def create_session(self) -> str:
        sid = f"sess-{uuid.uuid4().hex[:16]}"
        self.sessions[sid] = Session(sid)
        return sid

    def session(self, session_id: str, *, live: bool = True) -> Session:
        s = self.sessions.get(session_id)
        if s is None:
            raise ServeError(404, f"unknown session {session_id!r}: create one with a new ServiceClient")
        if live and s.finished:
            raise ServeError(400, f"session {session_id} has finished: start a new ServiceClient")
        return s

    def heartbeat(self, session_id: str) -> None:
        s = self.session(session_id, live=False)
        if s.finished:
            raise ServeError(410, f"session {session_id} has finished")
        s.last_heartbeat = time.time()

    def finish_session(self, session_id: str) -> None:
        """Mark the session done: its models are freed once their queued work has run, with the unnamed
        sampler snapshots of ``save_weights_and_get_sampling_client`` and its sampling sessions. Named
        sampler weights stay (a later session may sample a path a finished run saved, as on the hosted
        service), at most ``max_per_model`` per model, until the server stops."""
        s = self.session(session_id, live=False)
        if s.finished:
            return
        s.finished = True
        for model_id in s.models:
            entry = self.models.pop(model_id, None)
            if entry is not None:
                entry.worker.close()
            self.samplers.drop_model(model_id, only_prefix=f"tinker://{model_id}/sampler_weights/ephemeral-")
        for sid in [k for k, v in self.sampling_sessions.items() if v.session_id == session_id]:
            del self.sampling_sessions[sid]
        self.futures.drop_session(session_id)

    # ------------------------------------------------------------------ models
    def _entry(self, model_id: str) -> ModelEntry:
        entry = self.models.get(model_id)
        if entry is None:
            raise ServeError(
                404, f"unknown model_id {model_id!r}: create it with create_lora_training_client"
            )
        return entry

    def _check_base(self, base_model: str) -> None:
        if not self.served.accepts(base_model):
            raise ServeError(
                400, f"base model {base_model!r} is not served here: this server serves {self.served.name!r}"
            )

    def _new_model(
        self,
        session_id: str,
        seq: int,
        base_model: str,
        rank: int,
        modules: tuple[str, ...],
        seed: int | None,
    ) -> ModelEntry:
        session = self.session(session_id)
        model_id = f"{session_id}:train:{seq}"
        if model_id in self.models:
            raise ServeError(409, f"model {model_id} already exists")
        model = TrainedModel(model_id, base_model, self.settings, adapter_spec(rank, modules, seed))
        entry = ModelEntry(model, ModelWorker(model_id, self.futures, on_close=model.close), session_id)
        self.models[model_id] = entry
        session.models.append(model_id)
        return entry

    def create_model(self, req: Any) -> dict[str, Any]:
        """``create_model``: queue the model's loading as its request 0; answer with its future."""
        self._check_base(req.base_model)
        if req.optimizer_config is not None and getattr(req.optimizer_config, "type", "adamw") != "adamw":
            raise ServeError(400, UNSUPPORTED_MODEL_OPS["optimizer"])
        lora = req.lora_config
        if lora is None:
            raise ServeError(400, "only LoRA training is supported: pass a lora_config (rank)")
        if lora.rank < 1:
            raise ServeError(400, f"LoRA rank must be >= 1, got {lora.rank}")
        try:
            modules = target_modules(
                self.served.linear_kinds,
                train_attn=lora.train_attn,
                train_mlp=lora.train_mlp,
                train_unembed=lora.train_unembed,
            )
        except RequestError as exc:
            raise ServeError(400, str(exc)) from None
        entry = self._new_model(
            req.session_id, req.model_seq_id, req.base_model, lora.rank, modules, lora.seed
        )
        model = entry.model

        def build() -> dict[str, Any]:
            model.build()
            return {"model_id": model.model_id, "type": "create_model"}

        return self._queue(entry, 0, "create_model", build)

    def get_info(self, model_id: str) -> dict[str, Any]:
        model = self._entry(model_id).model
        return {
            "type": "get_info",
            "model_id": model_id,
            "model_data": {
                "arch": self.served.arch,
                "model_name": model.base_model,
                "tokenizer_id": self.served.path,
            },
            "is_lora": True,
            "lora_rank": model.spec.rank,
            "model_name": model.base_model,
        }

    def _queue(self, entry: ModelEntry, seq_id: int | None, name: str, run: Any) -> dict[str, Any]:
        record = self.futures.create(entry.session_id)
        request_id = entry.worker.submit(seq_id, Operation(name, run, record))
        return {"request_id": request_id, "model_id": entry.model.model_id}

    def _refuse(self, entry: ModelEntry, seq_id: int | None, message: str) -> dict[str, Any]:
        """Queue a request that fails with ``message``, keeping the model's sequence without a gap."""

        def refuse() -> dict[str, Any]:
            raise RequestError(message)

        return self._queue(entry, seq_id, "refused", refuse)

    def forward_backward(self, call: ForwardBackwardCall) -> dict[str, Any]:
        entry = self._entry(call.model_id)
        name = "forward" if call.forward_only else "forward_backward"
        return self._queue(entry, call.seq_id, name, lambda: entry.model.forward_backward(call))

    def optim_step(self, model_id: str, seq_id: int | None, params: Any) -> dict[str, Any]:
        entry = self._entry(model_id)
        if not hasattr(params, "beta2"):  # AdamParams; another family's params (DimuonParams) has a type
            return self._refuse(entry, seq_id, UNSUPPORTED_MODEL_OPS["optimizer"])
        values = params.model_dump()
        return self._queue(entry, seq_id, "optim_step", lambda: entry.model.optim_step(values))

    def refuse_model_op(self, model_id: str, seq_id: int | None, op: str) -> dict[str, Any]:
        return self._refuse(self._entry(model_id), seq_id, UNSUPPORTED_MODEL_OPS[op])

    # ------------------------------------------------------------------ weights
    def _checked_name(self, name: str | None, kind: str) -> str:
        if name is None or not _NAME.match(name):
            raise RequestError(
                f"{kind} name {name!r} must be 1-128 characters of letters, digits, '.', '_' or '-'"
            )
        return name

    def save_for_sampler(self, req: Any) -> dict[str, Any]:
        """``save_weights_for_sampler``: a named snapshot (``path``), or for
        ``save_weights_and_get_sampling_client`` an unnamed one with its sampling session."""
        entry = self._entry(req.model_id)
        model, session = entry.model, self.sessions[entry.session_id]
        if req.path is None:
            name = f"ephemeral-{session.ephemeral_samplers}"
            session.ephemeral_samplers += 1
            sampling_id = f"{entry.session_id}:sample:{req.sampling_session_seq_id}"
        else:
            name, sampling_id = req.path, None
        path = f"tinker://{model.model_id}/sampler_weights/{name}"

        def save() -> dict[str, Any]:
            self._checked_name(name, "sampler weights")
            self.samplers.add(path, model.model_id, model.merged_adapted_weights())
            if sampling_id is None:
                return {"path": path, "type": "save_weights_for_sampler"}
            self.sampling_sessions[sampling_id] = SamplingSession(entry.session_id, path)
            return {"path": None, "sampling_session_id": sampling_id, "type": "save_weights_for_sampler"}

        return self._queue(entry, req.seq_id, "save_weights_for_sampler", save)

    def state_dir_for(self, tinker_path: str) -> Path:
        """The directory of ``tinker://<model>/weights/<name>``."""
        m = re.fullmatch(r"tinker://([^/]+)/weights/([^/]+)", tinker_path)
        if m is None:
            raise RequestError(
                f"{tinker_path!r} is not a training state path (tinker://<model_id>/weights/<name>)"
            )
        model_id, name = m.groups()
        return self.state_dir / model_id.replace(":", "_") / "weights" / self._checked_name(name, "state")

    def save_state(self, req: Any) -> dict[str, Any]:
        entry = self._entry(req.model_id)
        model = entry.model

        def save() -> dict[str, Any]:
            path = f"tinker://{model.model_id}/weights/{self._checked_name(req.path, 'state')}"
            directory = self.state_dir_for(path)
            if directory.exists() and not req.overwrite:
                raise RequestError(f"state {path} exists: pass overwrite=True or another name")
            directory.mkdir(parents=True, exist_ok=True)
            model.save_state(directory)
            return {"path": path, "type": "save_weights"}

        return self._queue(entry, req.seq_id, "save_state", save)

    def load_weights(self, req: Any) -> dict[str, Any]:
        """``load_state`` into an existing model (legacy), or a new model created from a checkpoint."""
        if req.session_id is not None:
            return self._create_from_state(req)
        if req.model_id is None:
            raise ServeError(
                400, "load_weights needs model_id (load into a model) or session_id (create one)"
            )
        entry = self._entry(req.model_id)
        model = entry.model

        def load() -> dict[str, Any]:
            directory = self.state_dir_for(req.path)
            meta = read_state_meta(directory)
            if meta["adapter"]["rank"] != model.spec.rank:
                raise RequestError(
                    f"{req.path} has LoRA rank {meta['adapter']['rank']}; this model has {model.spec.rank}"
                )
            model.load_state(directory, optimizer=req.optimizer)
            return {"path": req.path, "model_id": model.model_id, "type": "load_weights"}

        return self._queue(entry, req.seq_id, "load_state", load)

    def _create_from_state(self, req: Any) -> dict[str, Any]:
        try:
            directory = self.state_dir_for(req.path)
            meta = read_state_meta(directory)
        except RequestError as exc:
            raise ServeError(400, str(exc)) from None
        base_model = req.base_model or meta["base_model"]
        self._check_base(base_model)
        adapter = meta["adapter"]
        entry = self._new_model(
            req.session_id,
            req.model_seq_id,
            base_model,
            adapter["rank"],
            tuple(adapter["target_modules"]),
            adapter["seed"],
        )
        model = entry.model

        def build_and_load() -> dict[str, Any]:
            model.build()
            model.load_state(directory, optimizer=req.optimizer)
            return {"path": req.path, "model_id": model.model_id, "type": "load_weights"}

        return self._queue(entry, 0, "create_from_state", build_and_load)

    # ------------------------------------------------------------------ sampling
    def create_sampling_session(self, req: Any) -> str:
        self.session(req.session_id)
        if req.model_path is not None:
            try:
                self.samplers.engine(req.model_path)
            except RequestError as exc:  # evicted or never saved: say so now, not at the first sample
                raise ServeError(400, str(exc)) from None
        elif req.base_model is None or not self.served.accepts(req.base_model):
            raise ServeError(
                400,
                f"base model {req.base_model!r} is not served here: this server serves {self.served.name!r}",
            )
        sid = f"{req.session_id}:sample:{req.sampling_session_seq_id}"
        self.sampling_sessions[sid] = SamplingSession(req.session_id, req.model_path)
        return sid

    def sampling_session(self, sid: str) -> SamplingSession:
        s = self.sampling_sessions.get(sid)
        if s is None:
            raise ServeError(404, f"unknown sampling session {sid!r}: create a sampling client first")
        return s

    def sampler_info(self, sid: str) -> dict[str, Any]:
        s = self.sampling_session(sid)
        return {"sampler_id": sid, "base_model": self.served.name, "model_path": s.model_path}

    def asample(self, req: Any) -> dict[str, Any]:
        """Start sampling in a task; answer with the future and one sequence id per sample."""
        if req.sampling_session_id is not None:
            sampling = self.sampling_session(req.sampling_session_id)
            session_id, path = sampling.session_id, sampling.model_path
        else:
            if req.model_path is None and (req.base_model is None or not self.served.accepts(req.base_model)):
                raise ServeError(
                    400, f"sample needs a sampling_session_id, a model_path or {self.served.name!r}"
                )
            session_id, path = None, req.model_path
        record = self.futures.create(session_id)
        unsupported = {
            "topk_prompt_logprobs": req.topk_prompt_logprobs,
            "topk_sample_logprobs": req.topk_sample_logprobs,
            "target_prompt_logprobs": req.target_prompt_logprobs,
            "prompt_alt_tokens_k": req.prompt_alt_tokens_k,
            "prompt_logprobs_last_n": req.prompt_logprobs_last_n,
            "record_stability_info": req.record_stability_info,
        }
        asked = [k for k, v in unsupported.items() if v]
        task = asyncio.get_running_loop().create_task(self._sample(record, req, path, asked))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        ids = [f"{record.request_id}:{j}" for j in range(req.num_samples)]
        return {"request_id": record.request_id, "sample_sequence_ids": ids}

    async def _sample(self, record: FutureRecord, req: Any, path: str | None, asked: list[str]) -> None:
        try:
            if asked:
                raise RequestError(f"sample options {asked} are not supported by rllm serve tinker")
            if req.num_samples < 1:
                raise RequestError(f"num_samples must be >= 1, got {req.num_samples}")
            engine = self.samplers.engine(path)
            proto = await sample(
                engine,
                req.prompt.to_ints(),
                req.num_samples,
                req.sampling_params.model_dump(),
                max_context=self.served.max_context,
                with_prompt_logprobs=bool(req.prompt_logprobs),
            )
        except (RequestError, ValueError) as exc:
            self.futures.fail(record, str(exc), "user")
        except Exception as exc:  # a failed sample fails its request, never the server
            logger.exception("sampling failed")
            self.futures.fail(record, f"sampling failed: {type(exc).__name__}: {exc}", "server")
        else:
            self.futures.resolve(record, proto=proto)
