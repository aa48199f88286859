"""The fast learning test: GRPO teaches a tiny random model a task it starts at chance on.

The model is a one-layer Llama over a 16-token vocabulary, so its first output is near-uniform
(chance = 1/16) and GRPO has signal from the first step. Groups of 16 attempts keep a task from
collapsing onto another task's answer before its own is ever sampled (a zero-variance group teaches
nothing). The task: shown the token ``q<i>``, answer
with the token ``a<i>`` (four tasks, each with its own right answer, so the model has to read the
prompt, not just learn one favourite token). Everything runs through ``AgentTrainer``: rollouts in the
local engine, advantages, the PPO loss in the local backend, weight sync, eval.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import WhitespaceSplit
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from rllm.runner.context import RolloutContext
from rllm.trainer.agent_trainer import AgentTrainer
from rllm.trainer.config import TrainConfig
from rllm.utils.config import load_config

EOS = "<eos>"
N_TASKS = 4
VOCAB = (
    [EOS]
    + [f"q{i}" for i in range(N_TASKS)]
    + [f"a{i}" for i in range(N_TASKS)]
    + [f"x{i}" for i in range(7)]
)
TOKEN_ID = {tok: i for i, tok in enumerate(VOCAB)}
CHANCE = 1 / len(VOCAB)


def make_tiny_vocab_model(out_dir: Path, seed: int = 0) -> Path:
    """A one-layer random Llama over ``VOCAB`` with a matching word-level tokenizer (eos = pad = 0)."""
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=_word_level(),
        eos_token=EOS,
        pad_token=EOS,
        unk_token=EOS,
        chat_template="{% for m in messages %}{{ m['content'] }} {% endfor %}",
    )
    config = LlamaConfig(
        vocab_size=len(VOCAB),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
        bos_token_id=None,
        eos_token_id=0,
        pad_token_id=0,
        tie_word_embeddings=False,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=0, pad_token_id=0)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def _word_level() -> Tokenizer:
    tok = Tokenizer(WordLevel(vocab=TOKEN_ID, unk_token=EOS))
    tok.pre_tokenizer = WhitespaceSplit()
    return tok


async def answer_workflow(task: dict[str, Any], ctx: RolloutContext) -> bool:
    """One token in, one token out; correct when it is the task's answer token."""
    completion = await ctx.complete(task["prompt_ids"], max_tokens=1)
    return completion.completion_ids == [task["answer_id"]]


TASKS = [
    {"task_id": f"q{i}", "prompt_ids": [TOKEN_ID[f"q{i}"]], "answer_id": TOKEN_ID[f"a{i}"]}
    for i in range(N_TASKS)
]


def learning_overrides(model_dir: Path, run_dir: Path, steps: int) -> list[str]:
    """The runs that learn in a few steps on this model (here, distillation, the monitors): full fine-tuning
    at a high learning rate in float32 on CPU, one thread, metrics to JSONL only, no eval in between."""
    return [
        f"model.path={model_dir}",
        "lora.enabled=false",
        "backend.device=cpu",
        "backend.autocast=none",
        "inference.dtype=float32",
        "optim.lr=0.02",
        f"trainer.steps={steps}",
        "trainer.threads=1",
        "eval.every_steps=0",
        "eval.max_tokens=1",
        f"trainer.run_dir={run_dir}",
        "trainer.loggers=[jsonl]",
        "trainer.plot=false",
    ]


def _config(model_dir: Path, run_dir: Path, steps: int) -> TrainConfig:
    return load_config(
        TrainConfig,
        None,
        [
            *learning_overrides(model_dir, run_dir, steps),
            "trainer.seed=0",
            f"rollout.batch_size={N_TASKS}",
            "rollout.group_size=16",
            "rollout.temperature=1.0",
            "rollout.max_tokens=1",
            "trainer.name=learn",
        ],
    )


def test_grpo_learns_from_chance(tmp_path: Path) -> None:
    model_dir = make_tiny_vocab_model(tmp_path / "model")
    steps = 30
    t0 = time.perf_counter()
    trainer = AgentTrainer(
        _config(model_dir, tmp_path / "runs", steps),
        workflow=answer_workflow,
        train_tasks=TASKS,
        test_tasks=TASKS,
    )
    result = trainer.train()
    wall_s = time.perf_counter() - t0

    records = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    rewards = [r["reward/mean"] for r in records if "reward/mean" in r]
    assert len(rewards) == steps
    print(
        f"\nlearning test: {steps} steps in {wall_s:.1f} s; reward by step: "
        + " ".join(f"{r:.2f}" for r in rewards)
    )
    print(f"greedy accuracy {result.initial_accuracy} -> {result.final_accuracy}")
    assert rewards[0] < 0.25, "the untrained model should be near chance (1/16)"
    assert sum(rewards[-3:]) / 3 >= 0.9
    assert result.final_accuracy == 1.0
    assert wall_s < 60
