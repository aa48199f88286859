"""The teacher of on-policy distillation (``algorithm.distill``): scores the tokens of a training batch.

Two kinds, one method (``logprobs(batch)``: per row, the teacher's logprob of each token given its prefix):

- ``LocalTeacher`` (``algorithm.distill.teacher``): a model directory or built-in name, loaded in this
  process without gradients and run over the batch's rows in micro-batches;
- ``RemoteTeacher`` (``algorithm.distill.teacher_url``): an OpenAI-compatible endpoint that returns prompt
  logprobs as vLLM does: ``POST /v1/completions`` with the row's token ids as the prompt, ``max_tokens=1``
  and ``prompt_logprobs=0``, whose ``choices[0].prompt_logprobs[i]`` maps the token at ``i`` to its logprob.

``build_teacher`` refuses at start-up, one line each, a teacher whose tokenizer is not the student's and an
endpoint that cannot be reached or does not return prompt logprobs (a probe call). The arithmetic that
turns the logprobs into advantages is ``rllm.algorithms.distill``.
"""

from __future__ import annotations

import logging
import math
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import httpx
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rllm.algorithms.logprobs import chunked_token_logprobs
from rllm.inference.local import pick_device
from rllm.models import resolve_model
from rllm.trainer.backends.base import UnsupportedConfigError
from rllm.trainer.config import DistillConfig, TrainConfig
from rllm.types import TrainBatch

logger = logging.getLogger(__name__)

# A sentence of ordinary text whose tokens the student's and the endpoint's tokenizers must agree on.
PROBE_TEXT = "On-policy distillation: the teacher scores 12 tokens, then 345 more."


class Teacher(Protocol):
    """What the trainer asks of a teacher (blocking calls, from the training thread)."""

    def logprobs(self, batch: TrainBatch) -> list[list[float]]:
        """Per row of ``batch``, one logprob per token of ``input_ids`` (0.0 at position 0 and wherever
        the loss mask is 0, which the teacher need not score)."""
        ...

    def close(self) -> None: ...


class LocalTeacher:
    """A causal LM in this process, frozen; scores rows ``micro_batch_size`` at a time, padded on the right."""

    def __init__(
        self, path: str, *, device: str, micro_batch_size: int, pad_id: int, chunk_tokens: int = 0
    ) -> None:
        self.device = pick_device(device)
        dtype = torch.bfloat16 if self.device.type == "cuda" else torch.float32
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
        self.model = model.to(self.device).eval().requires_grad_(False)
        self.micro_batch_size = micro_batch_size
        self.pad_id = pad_id
        self.chunk_tokens = chunk_tokens  # backend.logprob_chunk_tokens: the vocabulary projection in chunks

    @torch.no_grad()
    def logprobs(self, batch: TrainBatch) -> list[list[float]]:
        seqs = batch.sequences
        order = sorted(range(len(seqs)), key=lambda i: len(seqs[i].input_ids))  # less padding
        out: list[list[float]] = [[] for _ in seqs]
        for start in range(0, len(order), self.micro_batch_size):
            rows = [seqs[i] for i in order[start : start + self.micro_batch_size]]
            for i, lp in zip(order[start : start + self.micro_batch_size], self._score(rows)):
                out[i] = lp
        return out

    def _score(self, rows: list[Any]) -> list[list[float]]:
        T = max(len(s.input_ids) for s in rows)
        ids = torch.tensor([s.input_ids + [self.pad_id] * (T - len(s.input_ids)) for s in rows])
        attn = torch.tensor([[1] * len(s.input_ids) + [0] * (T - len(s.input_ids)) for s in rows])
        mask = torch.tensor([s.loss_mask + [0] * (T - len(s.input_ids)) for s in rows])[:, 1:].bool()
        ids, attn, mask = ids.to(self.device), attn.to(self.device), mask.to(self.device)
        hidden = self.model.get_decoder()(
            input_ids=ids, attention_mask=attn, use_cache=False
        ).last_hidden_state
        # The vocabulary projection only where a trained token is predicted (position t-1 predicts token t).
        lp_N, _ = chunked_token_logprobs(
            self.model.get_output_embeddings(),
            hidden[:, :-1][mask],
            ids[:, 1:][mask],
            chunk_tokens=self.chunk_tokens,
        )
        lp_BT = torch.zeros(mask.shape, dtype=lp_N.dtype, device=lp_N.device)
        lp_BT[mask] = lp_N
        return [[0.0] + lp_BT[b, : len(s.input_ids) - 1].tolist() for b, s in enumerate(rows)]

    def close(self) -> None:
        self.model = None


class TeacherEndpointError(UnsupportedConfigError):
    """The teacher endpoint cannot be reached, or its answer lacks the prompt logprobs distillation needs."""


class RemoteTeacher:
    """An OpenAI-compatible endpoint with vLLM's ``prompt_logprobs``; ``concurrency`` requests in flight."""

    def __init__(
        self, url: str, *, model: str | None, api_key: str | None, timeout_s: float, concurrency: int
    ) -> None:
        self.url = url.rstrip("/")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.Client(headers=headers, timeout=timeout_s)
        self.pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="teacher")
        self.model = model or self._first_model()

    def _first_model(self) -> str:
        try:
            response = self.client.get(f"{self.url}/models")
            response.raise_for_status()
            return str(response.json()["data"][0]["id"])
        except (httpx.HTTPError, KeyError, IndexError, ValueError) as exc:
            raise TeacherEndpointError(
                f"algorithm.distill.teacher_url={self.url}: GET {self.url}/models failed ({_short(exc)}); "
                "check the URL (the endpoint's /v1 base) or set algorithm.distill.teacher_model"
            ) from exc

    def score_ids(self, ids: list[int]) -> list[float]:
        """The endpoint's logprob of each token of ``ids`` given the ones before (0.0 at position 0)."""
        body = {"model": self.model, "prompt": ids, "max_tokens": 1, "temperature": 1.0, "prompt_logprobs": 0}
        response = self.client.post(f"{self.url}/completions", json=body)
        if response.status_code != 200:
            raise TeacherEndpointError(
                f"the teacher endpoint answered {response.status_code} to a scoring request: {response.text[:200]}"
            )
        entries = response.json()["choices"][0].get("prompt_logprobs")
        if not entries or len(entries) != len(ids):
            raise TeacherEndpointError(
                f"the teacher endpoint {self.url} returned no prompt_logprobs for {len(ids)} prompt tokens: it "
                "must answer /v1/completions with prompt_logprobs as vLLM does"
            )
        out = [0.0]
        for token, entry in zip(ids[1:], entries[1:]):
            scored = entry.get(str(token)) if entry else None
            if scored is None:
                raise TeacherEndpointError(f"the teacher's prompt_logprobs lack the prompt's token {token}")
            out.append(float(scored["logprob"]))
        return out

    def logprobs(self, batch: TrainBatch) -> list[list[float]]:
        return list(self.pool.map(lambda seq: self.score_ids(seq.input_ids), batch.sequences))

    def check(self, tokenizer: Any) -> None:
        """The probe call: the endpoint scores a short text, finitely, and (where it has vLLM's /tokenize)
        tokenizes it as the student does."""
        ids = tokenizer.encode(PROBE_TEXT, add_special_tokens=False)
        try:
            scores = self.score_ids(ids)
        except httpx.HTTPError as exc:
            raise TeacherEndpointError(
                f"algorithm.distill.teacher_url={self.url} cannot be reached ({_short(exc)}): start the server "
                "or fix the URL"
            ) from exc
        if not all(math.isfinite(s) for s in scores):
            raise TeacherEndpointError(f"the teacher endpoint {self.url} returned non-finite prompt logprobs")
        root = self.url.removesuffix("/v1")
        response = self.client.post(
            f"{root}/tokenize", json={"model": self.model, "prompt": PROBE_TEXT, "add_special_tokens": False}
        )
        if response.status_code == 404:
            logger.warning(
                "the teacher endpoint %s has no /tokenize: its tokenizer could not be compared with the "
                "student's (it must be the same: the teacher scores the student's token ids)",
                self.url,
            )
        elif response.status_code == 200 and response.json().get("tokens") != ids:
            raise UnsupportedConfigError(
                f"the teacher at {self.url} tokenizes text differently from the student ({self.model} is not "
                "on the student's vocabulary): distill from a teacher with the student's tokenizer"
            )

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.client.close()


def build_teacher(cfg: TrainConfig, student_tokenizer: Any, *, pad_id: int) -> Teacher | None:
    """The teacher ``algorithm.distill`` names (None when it names none), checked against the student."""
    d: DistillConfig = cfg.algorithm.distill
    if d.teacher_url is not None:
        api_key = None
        if d.api_key_env is not None:
            api_key = os.environ.get(d.api_key_env)
            if not api_key:
                raise UnsupportedConfigError(
                    f"algorithm.distill.api_key_env={d.api_key_env}, but that environment variable is not set"
                )
        remote = RemoteTeacher(
            d.teacher_url,
            model=d.teacher_model,
            api_key=api_key,
            timeout_s=d.timeout_s,
            concurrency=d.micro_batch_size,
        )
        try:
            remote.check(student_tokenizer)
        except BaseException:
            remote.close()
            raise
        logger.info(
            "distilling from %s at %s (mode %s, coef %g)", remote.model, d.teacher_url, d.mode, d.coef
        )
        return remote
    if d.teacher is None:
        return None
    path = resolve_model(d.teacher)
    check_same_tokenizer(path, student_tokenizer)
    logger.info("distilling from %s (mode %s, coef %g)", path, d.mode, d.coef)
    return LocalTeacher(
        path,
        device=cfg.backend.device,
        micro_batch_size=d.micro_batch_size,
        pad_id=pad_id,
        chunk_tokens=cfg.backend.logprob_chunk_tokens,
    )


def check_same_tokenizer(teacher_path: str, student_tokenizer: Any) -> None:
    """Refuse a local teacher whose vocabulary (token -> id, added tokens included) is not the student's."""
    try:
        teacher_tokenizer = AutoTokenizer.from_pretrained(teacher_path)
    except (OSError, ValueError) as exc:
        raise UnsupportedConfigError(
            f"algorithm.distill.teacher={teacher_path} has no tokenizer to compare with the student's: save the "
            "student's tokenizer beside the teacher's weights"
        ) from exc
    if teacher_tokenizer.get_vocab() != student_tokenizer.get_vocab():
        raise UnsupportedConfigError(
            f"algorithm.distill.teacher={teacher_path} has another vocabulary than the student "
            f"({len(teacher_tokenizer)} vs {len(student_tokenizer)} tokens, or other ids): the teacher scores "
            "the student's token ids, so it must use the student's tokenizer"
        )


def _short(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
