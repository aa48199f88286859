"""A role's adapter started from a saved one (``roles.<role>.init_adapter``) on the local backend (the tiny
model): ``rllm sft`` with LoRA writes ``final_model/adapter/``; a role started from it holds exactly its
weights while the other roles start fresh (B = 0); an adapter of another shape is refused at start-up with
the keys to set; a resumed run takes the adapter from its checkpoint, not the init."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from peft import PeftModel
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from rllm.trainer import SFTConfig, SFTTrainer
from rllm.trainer.backends.base import UnsupportedConfigError
from rllm.trainer.backends.local import LocalBackend
from rllm.trainer.checks import check_config
from rllm.trainer.config import TrainConfig
from rllm.types import TrainBatch, TrainSequence
from rllm.utils.config import ConfigError, load_config

PAD_ID = 2
LORA = ("lora.rank=4", "lora.alpha=8")
ROLES = ("roles.coordinator.adapter=coordinator", "roles.worker.adapter=worker")


@pytest.fixture(scope="module")
def sft_adapter(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The adapter of a 3-step ``rllm sft`` LoRA run on the tiny model."""
    root = tmp_path_factory.mktemp("sft")
    data = root / "data.jsonl"
    rows = [
        {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}
        for q, a in [("Parts: 3, 4?", "3, 4"), ("Parts: 7, 1, 2?", "7, 1, 2")]
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = load_config(
        SFTConfig,
        None,
        [
            f"model.path={tiny_model_dir}",
            f"data.train_file={data}",
            f"data.test_file={data}",
            f"trainer.run_dir={root}",
            "trainer.name=sft",
            "trainer.store_enabled=false",
            "trainer.loggers=[jsonl]",
            "trainer.plot=false",
            "trainer.steps=3",
            "optim.lr=0.05",
            "backend.device=cpu",
            "backend.autocast=none",
            *LORA,
        ],
    )
    result = SFTTrainer(cfg).train()
    assert result.final_model_dir is not None
    return result.final_model_dir / "adapter"


def _backend(model_dir: Path, *overrides: str) -> LocalBackend:
    cfg = load_config(
        TrainConfig,
        None,
        [
            f"model.path={model_dir}",
            "backend.device=cpu",
            "backend.autocast=none",
            "optim.lr=0.01",
            *overrides,
        ],
    )
    return LocalBackend(cfg, str(model_dir), pad_id=PAD_ID)


def _lora(backend: LocalBackend, adapter: str) -> dict[str, torch.Tensor]:
    """The adapter's weights under peft's saved names (``...q_proj.lora_A.weight``)."""
    marks = (f".lora_A.{adapter}.", f".lora_B.{adapter}.")
    return {
        n.replace(f".{adapter}.", "."): p.detach().clone()
        for n, p in backend.model.named_parameters()
        if any(m in n for m in marks)
    }


def test_sft_writes_its_adapter_beside_the_merged_model(sft_adapter: Path, tiny_model_dir: Path) -> None:
    assert (sft_adapter / "adapter_config.json").is_file()
    merged = AutoModelForCausalLM.from_pretrained(sft_adapter.parent, dtype=torch.float32).state_dict()
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    by_peft = PeftModel.from_pretrained(base, sft_adapter).merge_and_unload().state_dict()
    q = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(merged[q], AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()[q])
    for k, v in merged.items():  # the adapter, merged by peft itself, is the merged final model
        torch.testing.assert_close(v, by_peft[k], rtol=1e-5, atol=1e-6)


def test_a_role_starts_from_the_saved_adapter_and_the_others_fresh(
    sft_adapter: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    init = f"roles.coordinator.init_adapter={sft_adapter}"
    backend = _backend(tiny_model_dir, *LORA, *ROLES, init)
    saved = load_file(str(sft_adapter / "adapter_model.safetensors"))
    ours = _lora(backend, "coordinator")
    assert sorted(ours) == sorted(saved)
    for k, v in saved.items():
        torch.testing.assert_close(ours[k], v, rtol=0, atol=0)
    for fresh in ("worker", "default"):
        b = {k: v for k, v in _lora(backend, fresh).items() if ".lora_B." in k}
        assert b and all(not v.any() for v in b.values())

    # The coordinator's rows sample the SFT model: its logprobs are those of the merged final model.
    ids = [5, 17, 230, 9, 41, 7]
    row = TrainSequence(
        input_ids=ids,
        loss_mask=[0, 0, 1, 1, 1, 1],
        rollout_logprobs=[0.0] * 6,
        advantages=[0.0] * 6,
        trajectory_name="coordinator",
    )
    (ours_lp,) = backend.compute_logprobs(TrainBatch(sequences=[row]))
    merged = AutoModelForCausalLM.from_pretrained(sft_adapter.parent, dtype=torch.float32)
    with torch.no_grad():
        logits = merged(torch.tensor([ids])).logits[0, :-1].log_softmax(-1)
    want = logits.gather(-1, torch.tensor(ids[1:])[:, None])[:, 0].tolist()
    assert ours_lp[2:] == pytest.approx(want[1:], abs=1e-4)  # the trained (response) tokens

    # Resume: the checkpoint's adapter, not the init.
    with torch.no_grad():
        for n, p in backend.model.named_parameters():
            if ".lora_B.coordinator." in n:
                p.add_(0.5)
    backend.save_state(tmp_path / "ckpt")
    resumed = _backend(tiny_model_dir, *LORA, *ROLES, init)
    resumed.load_state(tmp_path / "ckpt")
    after = _lora(resumed, "coordinator")
    for k, v in _lora(backend, "coordinator").items():
        torch.testing.assert_close(after[k], v, rtol=0, atol=0)
    assert not torch.equal(
        after[next(k for k in after if ".lora_B." in k)], saved[next(k for k in saved if ".lora_B." in k)]
    )


def test_an_adapter_of_another_shape_is_refused_at_start_up_with_the_keys_to_set(
    sft_adapter: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    init = f"roles.coordinator.init_adapter={sft_adapter}"
    cfg = load_config(TrainConfig, None, [f"model.path={tiny_model_dir}", "lora.rank=8", *ROLES, init])
    with pytest.raises(
        UnsupportedConfigError, match=r"lora.rank=4, lora.alpha=8 but this run has lora.rank=8"
    ) as e:
        check_config(cfg, LocalBackend.capabilities)
    assert "set lora.rank=4 lora.alpha=8" in str(e.value)
    with pytest.raises(UnsupportedConfigError, match="lora.rank=4"):  # the backend refuses it too
        _backend(tiny_model_dir, "lora.rank=8", "lora.alpha=8", *ROLES, init)
    with pytest.raises(UnsupportedConfigError, match="lora.target_modules="):
        _backend(tiny_model_dir, *LORA, "lora.target_modules=[q_proj,v_proj]", *ROLES, init)
    with pytest.raises(UnsupportedConfigError, match="is not a saved PEFT adapter"):
        check_config(
            load_config(TrainConfig, None, [*ROLES, f"roles.coordinator.init_adapter={tmp_path}"]),
            LocalBackend.capabilities,
        )
    with pytest.raises(ConfigError, match="from two adapters"):
        load_config(
            TrainConfig,
            None,
            [
                "roles.a.adapter=shared",
                "roles.b.adapter=shared",
                f"roles.a.init_adapter={sft_adapter}",
                f"roles.b.init_adapter={tmp_path}",
            ],
        )
