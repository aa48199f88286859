"""The pool's logic that needs no vLLM: policy switches recorded on traces, re-route counting, retired
workers, top_k through the gateway, and the start-up refusals of ``VLLMPoolEngine``.

The "vLLM-dialect" workers here are real rllm gateways over the tiny model (they speak vLLM's
``return_token_ids`` extension), as in tests/gateway/test_http_upstream.py; the real vLLM pool is in
test_vllm_pool.py (marker ``vllm``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from rllm.gateway.app import create_app
from rllm.gateway.http_upstream import HTTPUpstream
from rllm.gateway.server import GatewayServer
from rllm.gateway.traces import TraceStore
from rllm.inference.local import LocalEngine
from rllm.inference.vllm_server import max_lora_rank_for
from rllm.trainer.config import TrainConfig
from rllm.trainer.vllm_pool import VLLMPoolEngine, VLLMPoolError
from rllm.utils.config import load_config


@pytest.fixture(scope="module")
def tiny_engine(tiny_model_dir: Path) -> LocalEngine:
    return LocalEngine.from_pretrained(str(tiny_model_dir), device="cpu", dtype="float32")


@pytest.fixture()
def workers(tiny_engine: LocalEngine, tmp_path: Path) -> Iterator[list[GatewayServer]]:
    out = [
        GatewayServer(create_app(tiny_engine, TraceStore(tmp_path / f"w{i}.db"), model_name="w")).start()
        for i in range(2)
    ]
    yield out
    for srv in out:
        srv.stop()


def _complete(url: str, session: str, **kw: object) -> httpx.Response:
    body = {
        "model": "policy",
        "prompt": [1, 2, 3],
        "max_tokens": 3,
        "logprobs": 0,
        "return_token_ids": True,
        **kw,
    }
    return httpx.post(f"{url}/sessions/{session}/v1/completions", json=body, timeout=60)


def test_policy_switch_is_recorded_and_reroutes_are_counted(
    workers: list[GatewayServer], tmp_path: Path
) -> None:
    # Health checks far apart: the death is found by the call itself, which must then move.
    upstream = HTTPUpstream([w.url for w in workers], kind="vllm", model="base", health_interval_s=60)
    store = TraceStore(tmp_path / "front.db")
    with GatewayServer(create_app(upstream, store, model_name="policy")) as front:
        assert _complete(front.url, "s0").status_code == 200
        r = httpx.post(f"{front.url}/admin/policy", json={"model": "rllm-v1", "weight_version": 1})
        assert r.status_code == 200
        assert r.json() == {"model": "rllm-v1", "adapters": {}, "weight_version": 1}
        assert upstream.request_body(_request())["model"] == "rllm-v1"
        assert _complete(front.url, "s0").status_code == 200
        assert [t.weight_version for t in store.list("s0")] == [0, 1]
        # Bad bodies are 400s in OpenAI's shape.
        bad = httpx.post(f"{front.url}/admin/policy", json={"weight_version": -1})
        assert bad.status_code == 400 and "weight_version" in bad.json()["error"]["message"]

        # The worker serving session a dies: a's next call is served by the other one, counted once; the dead
        # worker stays out of routing (new sessions avoid it) until its health check passes.
        first = _complete(front.url, "a")
        assert first.status_code == 200
        served = store.list("a")[-1].upstream
        dead = next(w for w in workers if w.url + "/v1" == served)
        dead.stop()
        assert _complete(front.url, "a").status_code == 200
        assert store.list("a")[-1].upstream != served
        m = upstream.metrics()
        assert (
            m["pool/calls_rerouted"] == 1
            and m["pool/worker_failures"] == 1
            and m["pool/servers_healthy"] == 1
        )
        for s in ("b", "c", "d"):
            assert _complete(front.url, s).status_code == 200
            assert store.list(s)[-1].upstream != served
        assert upstream.metrics()["pool/calls_rerouted"] == 1  # the dead worker was skipped, not tried
        # Every call made it into the store exactly once.
        assert len(store.list("a")) == 2 and all(len(store.list(s)) == 1 for s in ("b", "c", "d"))

        # A retired worker is never routed to, even when healthy.
        live = next(w for w in workers if w is not dead)
        upstream.retire(live.url)
        r = _complete(front.url, "e")
        assert r.status_code == 502
        assert upstream.metrics()["pool/servers_retired"] == 1
    store.close()


def _request():  # type: ignore[no-untyped-def]
    from rllm.gateway.upstreams import UpstreamRequest
    from rllm.inference.base import SamplingParams

    return UpstreamRequest(endpoint="completions", prompt=[1], params=SamplingParams())


def test_top_k_reaches_the_engine(tiny_engine: LocalEngine, tmp_path: Path) -> None:
    store = TraceStore(tmp_path / "t.db")
    with GatewayServer(create_app(tiny_engine, store, model_name="m")) as gw:
        assert _complete(gw.url, "k", top_k=1, temperature=1.0, max_tokens=6, seed=3).status_code == 200
        assert _complete(gw.url, "k", top_k=-1, max_tokens=2).status_code == 200
        assert _complete(gw.url, "k", top_k=-2).status_code == 400
        assert _complete(gw.url, "k", ignore_eos=True, max_tokens=5).status_code == 200
        first, off, eos = store.list("k")
        assert first.request["sampling_params"]["top_k"] == 1 and off.request["sampling_params"]["top_k"] == 0
        # top_k=1 samples the argmax: every sampled token has probability 1 under the filtered distribution
        # the local engine does not report (it reports pre-filter logprobs), so compare with greedy instead.
        greedy = _complete(gw.url, "g", temperature=0, max_tokens=6).json()
        assert first.completion_token_ids == greedy["choices"][0]["token_ids"]
        assert eos.request["sampling_params"]["ignore_eos"] and len(eos.completion_token_ids) == 5
    store.close()


def test_local_upstream_has_no_policy_to_set(tiny_engine: LocalEngine, tmp_path: Path) -> None:
    store = TraceStore(tmp_path / "t.db")
    with GatewayServer(create_app(tiny_engine, store, model_name="m")) as gw:
        r = httpx.post(f"{gw.url}/admin/policy", json={"model": "x", "weight_version": 1})
        assert r.status_code == 400 and "in-process engine" in r.json()["error"]["message"]
    store.close()


def _cfg(*overrides: str) -> TrainConfig:
    return load_config(TrainConfig, None, ["inference.engine=vllm", *overrides])


def test_start_up_refusals_are_one_line(tiny_model_dir: Path, tmp_path: Path) -> None:
    def build(*overrides: str) -> VLLMPoolEngine:
        return VLLMPoolEngine.from_config(
            _cfg(*overrides), tiny_model_dir, trace_store_path=tmp_path / "t.db", sync_dir=tmp_path / "sync"
        )

    cases = {
        ("inference.vllm.python=/nonexistent/bin/python",): "run scripts/setup_vllm.sh",
        ("lora.rank=64", "inference.vllm.max_lora_rank=32"): "raise max_lora_rank to 64 or lower lora.rank",
        ("inference.vllm.max_lora_rank=24",): "not a value vLLM accepts",
        ("lora.rank=600",): "above the largest --max-lora-rank",
        (
            "inference.vllm.num_servers=2",
            "inference.vllm.servers=[{tensor_parallel_size: 1}]",
        ): "one entry per server",
    }
    for overrides, expected in cases.items():
        with pytest.raises(VLLMPoolError) as err:
            build(*overrides)
        msg = str(err.value)
        assert expected in msg and "\n" not in msg, (overrides, msg)
    # The rank vLLM gets by default is the smallest it accepts that holds the adapter.
    assert [max_lora_rank_for(r) for r in (1, 2, 8, 9, 32, 33)] == [1, 8, 8, 16, 32, 64]
    assert isinstance(VLLMPoolError("x"), ValueError)  # the trainer maps it to UnsupportedConfigError


class _NamedAdapters:
    """A backend with per-role adapters, as far as the refusals below read it (they refuse before saving)."""

    def __init__(self, *names: str) -> None:
        self.adapter_names = list(names)

    def save_adapter(self, path: Path, adapter: str | None = None) -> None:
        raise AssertionError("a refused sync must not write adapters")


def test_several_adapters_refusals(tiny_model_dir: Path, tmp_path: Path) -> None:
    import asyncio

    from rllm.inference.base import SamplingParams
    from rllm.trainer.vllm_pool import VLLMSyncError

    def build(*overrides: str) -> VLLMPoolEngine:  # attached (not started): no server is reached
        cfg = _cfg("inference.vllm.urls=[http://127.0.0.1:9]", *overrides)
        return VLLMPoolEngine.from_config(
            cfg, tiny_model_dir, trace_store_path=tmp_path / "t.db", sync_dir=tmp_path / "sync"
        )

    assert VLLMPoolEngine.capabilities.adapters
    with pytest.raises(VLLMSyncError, match="started without LoRA"):
        build("lora.enabled=false").sync_from(_NamedAdapters("solver"), version=1)
    pool = build()
    with pytest.raises(VLLMSyncError, match="adapter name 'a/b' cannot name a vLLM model"):
        pool.sync_from(_NamedAdapters("solver", "a/b"), version=1)
    with pytest.raises(ValueError, match="unknown adapter 'solver': the vLLM pool has loaded none"):
        asyncio.run(pool.generate([1, 2], SamplingParams(), adapter="solver"))
