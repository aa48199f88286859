"""The GPU check: prove rllm's CUDA paths on one lent GPU in minutes, and print one table of what they did.

Run through ``scripts/gpu_check.sh`` (it installs carried wheels first; see that file). Sections, each in its
own ``try`` so one failure still leaves the others' rows, with the error in its row:

1. ``grpo full`` / ``grpo lora``: ``trainer.steps`` GRPO steps through the real :class:`AgentTrainer` (local
   engine samples, local backend trains, bf16 autocast) on a random-init model of a real shape. Step time,
   rollout tokens/s (generated), train tokens/s (every token of every trained sequence), peak CUDA memory
   (``torch.cuda.max_memory_allocated``), and MFU = train tokens/s x model FLOPs per token / peak FLOP/s
   (``--peak-tflops``, default the H200's 989 dense bf16), with FLOPs per token = 6 N for a full fine-tune
   (forward 2 N, backward 4 N) and 4 N with LoRA (no weight gradients for the frozen base), N = the weights
   of every matrix product (attention, MLP, LM head). Step medians leave out the first step (CUDA warm-up).
2. ``decode bN``: the local inference engine's decode speed at batch 1 and 32: one call per row, each
   exactly 128 tokens (``ignore_eos``; 8 in the dry run), one warm-up run, then one timed run.
3. ``distributed ray ws=1``: backend.name=distributed at world size 1 through the trainer, when Ray is
   installed; a ``skipped`` row when it is not (the distributed backend places its ranks with Ray).
   ``fsdp rank ws=1``: the distributed backend's rank (``FSDPRank``, FSDP2) in this process, without
   Ray, in a one-rank NCCL group: forward/backward and an optimizer step on a synthetic batch.

``--dry-run`` runs the same code on CPU with a tiny model (hidden 64, 2 layers; gloo instead of NCCL), in
seconds: the plumbing check CI runs. The model shape for the GPU: Qwen2.5-0.5B's layers (hidden 896,
14 heads / 2 KV heads, MLP 4864) with SmolLM2's 49152-token tokenizer (the one the tests use; no network
on a lent machine) and 30 layers instead of 24 to make up for the smaller vocabulary: 0.49 B parameters.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import importlib.util
import json
import os
import resource
import socket
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a bare checkout too (the GPU machine has no rllm installed)

H200_BF16_DENSE_TFLOPS = 989.0  # NVIDIA's H200 SXM datasheet: dense bf16 (1979 with sparsity); --peak-tflops
CARRIED_TOKENIZER = REPO / ".gpu_carry" / "tokenizer"  # scripts/gpu_check.sh --prepare puts it there
SHAPES = {  # LlamaConfig arguments
    "gpu": {
        "hidden_size": 896,
        "num_hidden_layers": 30,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "intermediate_size": 4864,
    },
    "dry": {
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 128,
    },
}
COLUMNS = (
    "section",
    "status",
    "step_s",
    "rollout_tok_s",
    "train_tok_s",
    "decode_tok_s",
    "peak_mem_gib",
    "mfu",
)


@dataclass
class Row:
    """One line of the table: a section, whether it ran (ok / error / skipped), its numbers, a note."""

    section: str
    status: str = "ok"
    numbers: dict[str, float] = field(default_factory=dict)
    note: str = ""


@dataclass
class Setup:
    """What every section shares: the device, the model directory, its matmul weight count, the sizes."""

    device: str
    dry_run: bool
    model_dir: Path
    work: Path
    matmul_params: int
    vocab_size: int
    pad_id: int
    steps: int
    batch_size: int
    group_size: int
    max_tokens: int
    decode_tokens: int
    peak_tflops: float


# ------------------------------------------------------------------------------------------------ model


def tokenizer_source(given: str | None) -> Path:
    """The tokenizer's directory: ``--tokenizer``, else the carried copy, else the built-in model's (pulled
    from the local cache: a machine with the rllm set-up has it)."""
    if given:
        return Path(given)
    if (CARRIED_TOKENIZER / "tokenizer.json").is_file():
        return CARRIED_TOKENIZER
    from rllm.models import TINY_TOKENIZER_SOURCE, pull_model  # pydantic etc.: only when not carried

    return pull_model(TINY_TOKENIZER_SOURCE)


def build_model(out: Path, shape: dict[str, int], tokenizer_dir: Path, device: str) -> int:
    """A random-init Llama of ``shape`` with the tokenizer of ``tokenizer_dir`` saved to ``out`` (bf16 on
    GPU, fp32 on CPU); returns N, the weights of its matrix products (the LM head included)."""
    from transformers import AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=eos,
        pad_token_id=eos,
        **shape,
    )
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id, eos_token_id=eos, pad_token_id=eos
    )
    model.to(torch.bfloat16 if device == "cuda" else torch.float32).save_pretrained(out)
    tokenizer.save_pretrained(out)
    # Every nn.Linear: q/k/v/o, the MLP's three, and the LM head (tied to the embedding, still a product).
    return sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))


# ------------------------------------------------------------------------------------------------ helpers


def _reset_peak(device: str) -> None:
    """Start a section's peak from what is still allocated, after the last section's objects are freed."""
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def _peak_gib(device: str) -> float:
    """Peak CUDA memory allocated since the last reset; on CPU, the process's peak RSS so far."""
    if device == "cuda":
        return torch.cuda.max_memory_allocated() / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def _mfu(s: Setup, tokens_per_s: float, flops_per_token: float) -> float | None:
    if s.device != "cuda":
        return None  # no peak to divide by on CPU
    return tokens_per_s * flops_per_token / (s.peak_tflops * 1e12)


def _free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _train_overrides(s: Setup, name: str) -> list[str]:
    dtype = "bfloat16" if s.device == "cuda" else "float32"
    return [
        f"model.path={s.model_dir}",
        f"trainer.run_dir={s.work / 'runs'}",
        f"trainer.name={name}",
        f"trainer.steps={s.steps}",
        "trainer.loggers=[jsonl]",
        "trainer.plot=false",
        "trainer.store_enabled=false",
        f"backend.device={s.device}",
        f"backend.autocast={'bf16' if s.device == 'cuda' else 'none'}",
        f"inference.dtype={dtype}",
        f"rollout.batch_size={s.batch_size}",
        f"rollout.group_size={s.group_size}",
        f"rollout.max_tokens={s.max_tokens}",
        "eval.before=false",
        "eval.after=false",
        "eval.every_steps=0",
        "algorithm.filters.drop_zero_variance=false",  # a random model's rewards tie: train on them anyway
    ]


def run_trainer(s: Setup, name: str, overrides: list[str]) -> list[dict[str, Any]]:
    """``rllm train`` in this process with ``overrides``; the per-step records of its metrics.jsonl."""
    from rllm.trainer.agent_trainer import AgentTrainer
    from rllm.trainer.config import TrainConfig
    from rllm.utils.config import load_config
    from rllm.utils.metrics import read_jsonl_metrics

    trainer = AgentTrainer(load_config(TrainConfig, None, [*_train_overrides(s, name), *overrides]))
    result = trainer.train()
    return [r for r in read_jsonl_metrics(result.run_dir / "metrics.jsonl") if "time/step_s" in r]


def step_numbers(s: Setup, records: list[dict[str, Any]], flops_per_token: float) -> dict[str, float]:
    """Medians over the steps after the first (the first pays CUDA's warm-up), and the MFU they give."""
    steady = records[1:] or records
    if not any("perf/train_tokens_per_s" in r for r in steady):
        raise RuntimeError(f"no step trained: {len(records)} step records without perf/train_tokens_per_s")

    def median(key: str) -> float:
        return statistics.median(r[key] for r in steady if key in r)

    numbers = {
        "step_s": median("time/step_s"),
        "rollout_tok_s": median("perf/rollout_tokens_per_s"),
        "train_tok_s": median("perf/train_tokens_per_s"),
        "peak_mem_gib": _peak_gib(s.device),
    }
    mfu = _mfu(s, numbers["train_tok_s"], flops_per_token)
    if mfu is not None:
        numbers["mfu"] = mfu
    return numbers


# ------------------------------------------------------------------------------------------------ sections


def grpo(s: Setup, lora: bool) -> Row:
    _reset_peak(s.device)
    name = "grpo-lora" if lora else "grpo-full"
    records = run_trainer(s, name, [f"lora.enabled={str(lora).lower()}"])
    return Row(
        f"grpo {'lora' if lora else 'full'}",
        numbers=step_numbers(s, records, (4 if lora else 6) * s.matmul_params),
    )


def decode(s: Setup, batch: int) -> Row:
    from rllm.inference.base import SamplingParams
    from rllm.inference.local import LocalEngine

    _reset_peak(s.device)
    dtype = "bfloat16" if s.device == "cuda" else "float32"
    engine = LocalEngine.from_pretrained(
        str(s.model_dir), device=s.device, dtype=dtype, max_batch_rows=batch, seed=0
    )
    prompt = engine.tokenizer.apply_chat_template(
        [{"role": "user", "content": "Which number is larger, 7 or 12?"}],
        add_generation_prompt=True,
        tokenize=True,
    )
    prompt = list(prompt["input_ids"] if isinstance(prompt, dict) or hasattr(prompt, "input_ids") else prompt)

    async def all_rows(seed: int) -> list[int]:
        async def row(i: int) -> int:
            params = SamplingParams(
                temperature=1.0, max_tokens=s.decode_tokens, ignore_eos=True, seed=seed + i
            )
            (completion,) = await engine.generate(prompt, params)
            return len(completion.completion_ids)

        return list(await asyncio.gather(*(row(i) for i in range(batch))))

    try:
        asyncio.run(all_rows(0))  # warm-up
        if s.device == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        lengths = asyncio.run(all_rows(1000))
        if s.device == "cuda":
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - started
    finally:
        engine.close()  # its decode thread holds the model
    if set(lengths) != {s.decode_tokens}:
        raise RuntimeError(f"rows generated {sorted(set(lengths))} tokens, expected {s.decode_tokens} each")
    return Row(
        f"decode b{batch}",
        numbers={"decode_tok_s": batch * s.decode_tokens / elapsed, "peak_mem_gib": _peak_gib(s.device)},
    )


def distributed_ray(s: Setup) -> Row:
    section = "distributed ray ws=1"
    if importlib.util.find_spec("ray") is None:
        return Row(
            section, "skipped", note="ray not installed (the distributed backend places its ranks with Ray)"
        )
    _reset_peak(s.device)
    comm = "nccl" if s.device == "cuda" else "gloo"
    records = run_trainer(
        s,
        "grpo-distributed",
        [
            "backend.name=distributed",
            "backend.distributed.world_size=1",
            f"backend.distributed.comm={comm}",
            "lora.enabled=false",
        ],
    )
    numbers = step_numbers(s, records, 6 * s.matmul_params)
    numbers.pop("peak_mem_gib")  # the rank is another process: this one's peak says nothing about it
    return Row(section, numbers=numbers, note=comm)


def fsdp_rank(s: Setup) -> Row:
    """The distributed backend's rank in this process, one-rank group, the driver's calls for one step."""
    import torch.distributed as dist

    from rllm.trainer.backends._fsdp_rank import FSDPRank
    from rllm.trainer.config import TrainConfig
    from rllm.types import TrainBatch, TrainSequence
    from rllm.utils.config import load_config

    comm = "nccl" if s.device == "cuda" else "gloo"
    overrides = [
        *_train_overrides(s, "fsdp-rank"),
        "backend.name=distributed",
        "backend.distributed.world_size=1",
        "lora.enabled=false",
    ]
    cfg = load_config(TrainConfig, None, overrides)
    cfg.backend.share_prefix = False  # as the driver sets it for its ranks
    _reset_peak(s.device)
    rank = FSDPRank(0, 1)
    try:
        rank.setup(cfg, str(s.model_dir), s.pad_id, ("127.0.0.1", _free_port()), comm, 1)
        generator = torch.Generator().manual_seed(0)
        prompt_len, rows = 64, s.batch_size * s.group_size
        sequences = []
        for i in range(rows):
            ids = torch.randint(3, s.vocab_size, (prompt_len + s.max_tokens,), generator=generator).tolist()
            mask = [0] * prompt_len + [1] * s.max_tokens
            sequences.append(
                TrainSequence(
                    input_ids=ids,
                    loss_mask=mask,
                    rollout_logprobs=[0.0] * prompt_len + [-10.0] * s.max_tokens,
                    advantages=[0.0] * prompt_len + [1.0 if i % 2 else -1.0] * s.max_tokens,
                    group_id=str(i // s.group_size),
                )
            )
        batch = TrainBatch(sequences=sequences)
        num_tokens, num_seqs = batch.loss_norms()
        shard = TrainBatch(sequences=sequences, loss_norm_tokens=num_tokens, loss_norm_sequences=num_seqs)
        micro = -(-rows // cfg.backend.micro_batch_size)
        times = []
        for _ in range(2):  # the first pays the warm-up
            if s.device == "cuda":
                torch.cuda.synchronize()
            started = time.perf_counter()
            rank.call(
                "shard_forward_backward",
                shard,
                cfg.algorithm.loss,
                None,
                None,
                micro,
                (sequences[0], None, None),
            )
            rank.call("optim_step")
            if s.device == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - started)
        tokens_per_s = batch.num_tokens / times[-1]
        numbers = {"step_s": times[-1], "train_tok_s": tokens_per_s, "peak_mem_gib": _peak_gib(s.device)}
        mfu = _mfu(s, tokens_per_s, 6 * s.matmul_params)
        if mfu is not None:
            numbers["mfu"] = mfu
        return Row("fsdp rank ws=1", numbers=numbers, note=f"{comm}, no Ray, synthetic batch")
    finally:
        rank.close()
        if dist.is_initialized():
            dist.destroy_process_group()


# ------------------------------------------------------------------------------------------------ table


def _cell(value: float | None, key: str) -> str:
    if value is None:
        return "-"
    if key == "mfu":
        return f"{100 * value:.1f}%"
    return f"{value:.3g}" if value < 100 else f"{value:,.0f}"


def table(rows: list[Row]) -> str:
    """One markdown table: a row per section, its numbers, then its status and note (the error, if any)."""
    head = [*COLUMNS, "note"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [
            row.section,
            row.status,
            *(_cell(row.numbers.get(k), k) for k in COLUMNS[2:]),
            row.note.replace("|", "/"),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def run_section(rows: list[Row], name: str, body: Callable[[], Row]) -> None:
    """Run one section; an exception becomes an ``error`` row with its last line, and the rest go on."""
    print(f"[gpu_check] {name} ...", flush=True)
    started = time.perf_counter()
    try:
        row = body()
    except Exception as e:  # noqa: BLE001 - every failure is a row: one broken section must not hide the rest
        traceback.print_exc()
        message = str(e).strip().splitlines()[-1] if str(e).strip() else ""
        row = Row(name, "error", note=f"{type(e).__name__}: {message}"[:200])
    print(f"[gpu_check] {name}: {row.status} in {time.perf_counter() - started:.1f} s", flush=True)
    rows.append(row)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--dry-run", action="store_true", help="CPU, tiny model, small sizes: the plumbing check (seconds)"
    )
    p.add_argument(
        "--tokenizer", help="tokenizer directory (default: .gpu_carry/tokenizer, else smollm2-135m's)"
    )
    p.add_argument("--steps", type=int, help="GRPO steps per training section (default 4; dry run 2)")
    p.add_argument(
        "--peak-tflops",
        type=float,
        default=H200_BF16_DENSE_TFLOPS,
        help="the GPU's dense bf16 peak, the MFU denominator (default: the H200's 989)",
    )
    p.add_argument("--json", help="also write the rows here (default: $OUT/gpu_check.json when $OUT is set)")
    p.add_argument("--keep", action="store_true", help="keep the work directory (model, runs)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    dry = args.dry_run
    if not dry and not torch.cuda.is_available():
        print(
            "[gpu_check] no CUDA device: run on a GPU machine, or pass --dry-run for the CPU plumbing check"
        )
        return 2
    device = "cpu" if dry else "cuda"
    if dry:
        torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    work = Path(tempfile.mkdtemp(prefix="rllm-gpu-check-"))
    rows: list[Row] = []
    started = time.perf_counter()
    try:
        tokenizer_dir = tokenizer_source(args.tokenizer)
        matmul = build_model(work / "model", SHAPES["dry" if dry else "gpu"], tokenizer_dir, device)
        model_config = json.loads((work / "model" / "config.json").read_text())
        s = Setup(
            device=device,
            dry_run=dry,
            model_dir=work / "model",
            work=work,
            matmul_params=matmul,
            vocab_size=model_config["vocab_size"],
            pad_id=model_config["pad_token_id"],
            steps=args.steps or (2 if dry else 4),
            batch_size=2 if dry else 8,
            group_size=2 if dry else 8,
            max_tokens=8 if dry else 256,
            decode_tokens=8 if dry else 128,
            peak_tflops=args.peak_tflops,
        )
        gpu = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
        print(
            f"[gpu_check] {gpu}; torch {torch.__version__}; model {matmul / 1e9:.3f} B matmul weights "
            f"({'dry run: tiny' if dry else '0.5B-shaped'}), tokenizer {tokenizer_dir}",
            flush=True,
        )
        run_section(rows, "grpo full", lambda: grpo(s, lora=False))
        run_section(rows, "grpo lora", lambda: grpo(s, lora=True))
        for b in (1, 32):
            run_section(rows, f"decode b{b}", lambda b=b: decode(s, b))
        run_section(rows, "distributed ray ws=1", lambda: distributed_ray(s))
        run_section(rows, "fsdp rank ws=1", lambda: fsdp_rank(s))
    except Exception as e:  # noqa: BLE001 - no model, no section: say so in the table
        traceback.print_exc()
        rows.append(Row("setup", "error", note=f"{type(e).__name__}: {e}"[:200]))
    finally:
        if not args.keep:
            import shutil

            shutil.rmtree(work, ignore_errors=True)
    print(
        f"\n[gpu_check] done in {time.perf_counter() - started:.0f} s ({'dry run, cpu' if dry else device})\n"
    )
    print(table(rows))
    out = args.json or (str(Path(os.environ["OUT"]) / "gpu_check.json") if os.environ.get("OUT") else None)
    if out:
        Path(out).write_text(json.dumps([row.__dict__ for row in rows], indent=2))
    return 0 if all(r.status != "error" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
