"""Supervised fine-tuning, rllm vs TRL's ``SFTTrainer``: seconds per optimizer step and the loss reached.

Both get the same model, the same conversations (a system prompt, a question, an assistant answer of a few
dozen tokens: ``make_chats``), in the same order (no shuffling on either side: rllm ``sft.shuffle=false``, TRL's sequential sampler), the same batch (sequences
per optimizer step, one forward/backward pass each: no gradient accumulation), the same steps, LoRA
settings (r, alpha, all linear layers, no dropout; or ``--full-finetune``), AdamW settings, constant
learning rate, gradient clipping, fp32 weights and compute and eager attention on both sides. The loss is
on the assistant tokens only on both sides: rllm renders with the gateway's chat template and masks the
rest; TRL gets the same conversations as conversational prompt/completion pairs (``completion_only_loss``),
which its chat template renders identically (TRL also trains the template's newline after the final
end-of-turn token, one token per row more than rllm). Both normalise the loss per token over the batch.

The first ``--warmup`` steps are not timed; the table reports the median seconds per step of the others, the
last step's training loss, and each side's peak RSS. Each framework runs in its own subprocess.

    python benchmarks/bench_sft.py            # smollm2-135m, 8 rows per step, 1 + 5 steps
    python benchmarks/bench_sft.py --quick    # plumbing check: tiny random model, 1 + 2 steps
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import (
    forward_args,
    header_line,
    markdown_table,
    peak_rss_mb,
    resolve_bench_model,
    run_worker,
    set_threads,
    write_result,
)

WORKERS = ("rllm", "trl")
SYSTEM = "You are a concise assistant that explains arithmetic step by step."


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--model", default="smollm2-135m", help="built-in name, model directory, hub id, or 'tiny'"
    )
    p.add_argument("--batch", type=int, default=8, help="sequences per optimizer step (one micro-batch)")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    p.add_argument("--steps", type=int, default=5, help="timed steps after the warm-up")
    p.add_argument("--full-finetune", action="store_true", help="train all weights instead of LoRA")
    p.add_argument("--lora-rank", type=int, default=16)
    p.add_argument("--lora-alpha", type=int, default=32)
    p.add_argument("--lr", type=float, default=2e-4)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", choices=WORKERS, default=None, help="run one framework only")
    p.add_argument(
        "--quick", action="store_true", help="plumbing check: tiny random model, 4 rows per step, 1 + 2 steps"
    )
    p.add_argument("--worker", choices=WORKERS, help=argparse.SUPPRESS)
    p.add_argument("--result-file", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.quick:
        args.model, args.batch, args.warmup, args.steps = "tiny", 4, 1, 2
    return args


def make_chats(n: int, seed: int) -> list[list[dict[str, str]]]:
    """``n`` single-turn conversations: an arithmetic question and a worked answer of varying length."""
    rng = random.Random(seed)
    chats = []
    for _ in range(n):
        a, b, c = rng.randint(2, 99), rng.randint(2, 99), rng.randint(2, 9)
        steps = [f"First, {a} + {b} = {a + b}.", f"Then {a + b} * {c} = {(a + b) * c}."]
        steps = steps[: rng.randint(1, 2)]
        answer = " ".join(steps) + f" So the answer is {(a + b) * c if len(steps) == 2 else a + b}."
        question = f"What is ({a} + {b}) * {c}?" if len(steps) == 2 else f"What is {a} + {b}?"
        chats.append(
            [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": question},
                {"role": "assistant", "content": answer},
            ]
        )
    return chats


def _rows(args: argparse.Namespace) -> list[list[dict[str, str]]]:
    return make_chats(args.batch * (args.warmup + args.steps), args.seed)


# ---------------------------------------------------------------------------------------------- workers


def run_rllm(args: argparse.Namespace, run_dir: str) -> dict[str, Any]:
    from rllm.trainer import SFTConfig, SFTTrainer
    from rllm.trainer.sft_data import Conversation
    from rllm.utils.config import load_config

    steps = args.warmup + args.steps
    cfg = load_config(
        SFTConfig,
        None,
        [
            f"model.path={args.model}",
            f"lora.enabled={str(not args.full_finetune).lower()}",
            f"lora.rank={args.lora_rank}",
            f"lora.alpha={args.lora_alpha}",
            "lora.target_modules=all-linear",
            "lora.dropout=0.0",
            f"optim.lr={args.lr}",
            "optim.grad_clip=1.0",
            "optim.schedule=constant",
            f"sft.batch_size={args.batch}",
            "sft.shuffle=false",  # the rows in the given order, as TRL's sequential sampler takes them
            f"trainer.steps={steps}",
            f"trainer.seed={args.seed}",
            f"trainer.run_dir={run_dir}",
            "trainer.loggers=[jsonl]",
            "trainer.plot=false",
            "trainer.store_enabled=false",
            "backend.device=cpu",
            "backend.autocast=none",
            "backend.attn_implementation=eager",
            f"backend.micro_batch_size={args.batch}",
        ],
    )
    trainer = SFTTrainer(cfg, train=[Conversation(m) for m in _rows(args)], test=[])
    trainer.train()
    lines = [
        json.loads(x) for x in (Path(run_dir) / cfg.trainer.name / "metrics.jsonl").read_text().splitlines()
    ]
    steps_s = [x["time/step_s"] for x in lines if "time/step_s" in x]
    losses = [x["train/loss"] for x in lines if "train/loss" in x]
    return {
        "step_s": steps_s[args.warmup :],
        "losses": losses,
        "tokens": trainer.train_stats.tokens,
        "peak_rss_mb": peak_rss_mb(),
    }


def run_trl(args: argparse.Namespace, run_dir: str) -> dict[str, Any]:
    import datasets
    import torch
    import trl
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

    rows = _rows(args)
    dataset = datasets.Dataset.from_list([{"prompt": m[:-1], "completion": m[-1:]} for m in rows])
    times: list[float] = []
    losses: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, *_: Any, **__: Any) -> None:
            self.started = time.perf_counter()

        def on_step_end(self, *_: Any, **__: Any) -> None:
            times.append(time.perf_counter() - self.started)

        def on_log(
            self, _args: Any, _state: Any, _control: Any, logs: dict[str, float] | None = None, **__: Any
        ) -> None:
            if logs and "loss" in logs:
                losses.append(float(logs["loss"]))

    config = trl.SFTConfig(
        output_dir=run_dir,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        seed=args.seed,
        use_cpu=True,
        bf16=False,
        fp16=False,
        gradient_checkpointing=False,
        max_steps=args.warmup + args.steps,
        per_device_train_batch_size=args.batch,
        gradient_accumulation_steps=1,
        completion_only_loss=True,
        padding_free=False,
        packing=False,
        shuffle_dataset=False,
        train_sampling_strategy="sequential",  # the rows in dataset order, as rllm (sft.shuffle=false) takes them
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        adam_beta1=0.9,
        adam_beta2=0.999,
        adam_epsilon=1e-8,
        max_grad_norm=1.0,
        optim="adamw_torch_fused",
        dataloader_num_workers=0,
    )
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32, attn_implementation="eager")
    peft_config = None
    if not args.full_finetune:
        from peft import LoraConfig

        peft_config = LoraConfig(
            r=args.lora_rank,
            lora_alpha=args.lora_alpha,
            lora_dropout=0.0,
            target_modules="all-linear",
            task_type="CAUSAL_LM",
        )
    trainer = trl.SFTTrainer(
        model=model,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=[Clock()],
    )
    trainer.train()
    return {"step_s": times[args.warmup :], "losses": losses, "peak_rss_mb": peak_rss_mb()}


def worker_main(args: argparse.Namespace) -> None:
    set_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix=f"rllm-bench-sft-{args.worker}-") as run_dir:
        result = (run_rllm if args.worker == "rllm" else run_trl)(args, run_dir)
    write_result(args.result_file, result)


# ---------------------------------------------------------------------------------------------- parent


def main() -> None:
    args = parse_args()
    if args.worker:
        worker_main(args)
        return
    import trl

    model_path = resolve_bench_model(args.model)
    names = [
        "model",
        "batch",
        "warmup",
        "steps",
        "lora_rank",
        "lora_alpha",
        "lr",
        "seed",
        "full_finetune",
        "threads",
    ]
    common = forward_args(args, names, model=model_path)
    workers = [args.only] if args.only else list(WORKERS)
    results = {w: run_worker(__file__, w, common) for w in workers}
    print()
    print(header_line())
    print(
        f"model {args.model}, {args.batch} rows per step, {args.warmup} + {args.steps} steps, "
        f"{'full fine-tune' if args.full_finetune else f'LoRA r={args.lora_rank} alpha={args.lora_alpha}'}, "
        f"lr {args.lr:g}, fp32, eager attention; TRL {trl.__version__}"
    )
    table = []
    for w, r in results.items():
        label = "rllm sft" if w == "rllm" else "TRL SFTTrainer"
        table.append(
            [
                label,
                f"{statistics.median(r['step_s']):.3f}",
                f"{r['losses'][0]:.4f}",
                f"{r['losses'][-1]:.4f}",
                f"{r['peak_rss_mb']:.0f}",
            ]
        )
    print(markdown_table(["", "s/step (median)", "loss, step 1", "loss, last step", "peak RSS MB"], table))
    if len(results) == 2:
        ratio = statistics.median(results["trl"]["step_s"]) / statistics.median(results["rllm"]["step_s"])
        print(f"\nrllm sft step time: {ratio:.2f}x TRL's speed (TRL s/step / rllm s/step)")


if __name__ == "__main__":
    main()
