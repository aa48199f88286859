"""``rllm serve tinker --backend distributed``: each trained model's LoRA adapter and optimizer live on 2 FSDP2
ranks placed by Ray, and the real ``tinker`` SDK cannot tell. The first ``forward_backward`` (the adapter
starts at zero) reports the same loss and logprobs as a service on the local backend; steps train; sampler
weights gathered from the ranks sample; closing the session stops the ranks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

tinker = pytest.importorskip("tinker", reason="the tinker extra (in rllm[test]) is not installed")

from rllm.serve.tinker import ServeConfig, ServerThread, build_service

API_KEY = "tml-rllm-tests"


@pytest.fixture
def servers(ray_cluster: object, tiny_model_dir: Path, tmp_path: Path) -> Iterator[dict[str, str]]:
    urls: dict[str, str] = {}
    threads = []
    for backend in ("local", "distributed"):
        cfg = ServeConfig(
            model=str(tiny_model_dir),
            device="cpu",
            dtype="float32",
            state_dir=str(tmp_path / backend),
            micro_batch_size=4,
            backend=backend,
            world_size=2,
        )
        thread = ServerThread(build_service(cfg), api_key=API_KEY).__enter__()
        threads.append(thread)
        urls[backend] = thread.base_url
    try:
        yield urls
    finally:
        for thread in threads:
            thread.__exit__(None, None, None)


def _data(tokens: list[list[int]]) -> list[object]:
    t = tinker.types
    out = []
    for ids in tokens:
        n = len(ids) - 1
        out.append(
            t.Datum(
                model_input=t.ModelInput.from_ints(ids[:-1]),
                loss_fn_inputs={
                    "target_tokens": t.TensorData.from_numpy(np.asarray(ids[1:], dtype=np.int64)),
                    "logprobs": t.TensorData.from_numpy(np.full(n, -3.0, dtype=np.float32)),
                    "advantages": t.TensorData.from_numpy(np.linspace(-1.0, 1.0, n, dtype=np.float32)),
                },
            )
        )
    return out


def test_a_distributed_model_answers_as_a_local_one(servers: dict[str, str], tiny_model_dir: Path) -> None:
    data = _data([[5, 6, 7, 8, 9], [10, 11, 12], [13, 14, 15, 16, 17, 18, 19]])
    results = {}
    for backend, url in servers.items():
        service = tinker.ServiceClient(base_url=url, api_key=API_KEY)
        training = service.create_lora_training_client(
            base_model=str(tiny_model_dir), rank=4, seed=3
        ).result()
        first = training.forward_backward(data, "importance_sampling").result(timeout=300)
        training.optim_step(tinker.types.AdamParams(learning_rate=1e-2)).result(timeout=300)
        second = training.forward(data, "importance_sampling").result(timeout=300)
        path = training.save_weights_for_sampler("after-one-step").result(timeout=300).path
        sampler = service.create_sampling_client(model_path=path).result()
        sample = sampler.sample(
            tinker.types.ModelInput.from_ints([5, 6]),
            num_samples=2,
            sampling_params=tinker.types.SamplingParams(max_tokens=4, seed=1),
        ).result(timeout=300)
        results[backend] = (first, second, sample)
        service.close("success").result(timeout=300)  # frees the model: the distributed one stops its ranks
    (local_first, local_second, _), (dist_first, dist_second, dist_sample) = (
        results["local"],
        results["distributed"],
    )
    assert dist_first.metrics["loss:sum"] == pytest.approx(local_first.metrics["loss:sum"], rel=1e-4)
    for a, b in zip(local_first.loss_fn_outputs, dist_first.loss_fn_outputs):
        np.testing.assert_allclose(a["logprobs"].to_numpy(), b["logprobs"].to_numpy(), atol=1e-4)
    # After one step both moved the policy (LoRA initialisations differ per backend: no equality asked).
    assert dist_second.metrics["loss:sum"] != pytest.approx(dist_first.metrics["loss:sum"], abs=1e-7)
    assert local_second.metrics["loss:sum"] != pytest.approx(local_first.metrics["loss:sum"], abs=1e-7)
    assert len(dist_sample.sequences) == 2 and all(len(s.tokens) >= 1 for s in dist_sample.sequences)
    assert all(len(s.logprobs) == len(s.tokens) for s in dist_sample.sequences)
