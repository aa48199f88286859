"""One GRPO optimizer step, rllm vs TRL's ``GRPOTrainer``: seconds per step and peak memory.

Both frameworks get the same model, the same prompts in the same order (chat-templated "which number is
larger" tasks), the same group size, prompts per step, completion length, sampling (temperature 1.0, no
top-k / top-p), LoRA (r=32, alpha=64, all linear layers; or ``--full-finetune``), precision (fp32 master
weights with bf16 autocast where the CPU runs bf16 natively), micro-batch size, AdamW settings, gradient
clipping, and reward (the last number in the reply equals the answer). No reference model in either
(rllm ``kl_coef=0``, TRL ``beta=0``), one gradient step per batch (TRL ``num_iterations=1``), no gradient
checkpointing (TRL turns it on by default; we turn it off to match rllm's default).

A step is everything from taking the prompts to being ready to sample the next batch: generation,
reward, advantages, forward/backward, optimizer step, and for rllm the weight sync into its inference
engine. rllm keeps every group (``drop_zero_variance=false``) so it never skips a backward that TRL does.
The first ``--warmup`` steps are not timed; the table reports the median and min of the next ``--steps``.
Each framework runs in its own subprocess, so its peak RSS is its own.

    python benchmarks/bench_grpo_vs_trl.py                     # 2 prompts x 4 completions x 32 tokens
    python benchmarks/bench_grpo_vs_trl.py --preset larger     # 8 prompts x 8 completions x 32 tokens
    python benchmarks/bench_grpo_vs_trl.py --quick             # plumbing check: tiny model, 1 step
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from typing import Any

from _common import (
    RssSampler,
    cpu_has_bf16,
    forward_args,
    machine_line,
    markdown_table,
    median_min,
    peak_rss_mb,
    resolve_bench_model,
    rss_mb,
    run_worker,
    set_threads,
    write_result,
)

WORKERS = ("rllm", "trl")
PRESETS = {"default": (2, 4, 32), "larger": (8, 8, 32)}  # prompts per step, completions per prompt, tokens


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--model", default="smollm2-135m", help="built-in name, model directory, hub id, or 'tiny'"
    )
    p.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        default="default",
        help="default: 2 prompts x 4 completions x 32 tokens; larger: 8 x 8 x 32",
    )
    p.add_argument("--prompts", type=int, help="prompts per step (overrides the preset)")
    p.add_argument(
        "--generations", type=int, help="completions per prompt, the GRPO group (overrides the preset)"
    )
    p.add_argument("--max-tokens", type=int, help="max completion tokens (overrides the preset)")
    p.add_argument(
        "--full-length",
        action="store_true",
        help="make every completion exactly --max-tokens long (rllm ignore_eos, TRL min_new_tokens)",
    )
    p.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    p.add_argument("--steps", type=int, default=5, help="timed steps after the warm-up")
    p.add_argument("--full-finetune", action="store_true", help="train all weights instead of LoRA")
    p.add_argument("--lora-rank", type=int, default=32)
    p.add_argument("--lora-alpha", type=int, default=64)
    p.add_argument(
        "--precision",
        choices=["auto", "bf16", "fp32"],
        default="auto",
        help="bf16: fp32 weights + bf16 autocast in both (rllm also samples from a bf16 copy); "
        "auto: bf16 where the CPU runs it natively, else fp32",
    )
    p.add_argument("--micro-batch", type=int, default=16, help="sequences per forward/backward pass in both")
    p.add_argument(
        "--lr",
        type=float,
        default=1e-6,
        help="small by default so the policy barely moves and both sample from ~the same model",
    )
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", choices=WORKERS, default=None, help="run one framework only")
    p.add_argument(
        "--quick",
        action="store_true",
        help="plumbing check: tiny random model, 2 prompts x 4 completions x 8 tokens, 1 + 1 steps",
    )
    p.add_argument("--worker", choices=WORKERS, help=argparse.SUPPRESS)
    p.add_argument("--result-file", help=argparse.SUPPRESS)
    args = p.parse_args()
    prompts, generations, max_tokens = PRESETS[args.preset]
    if args.quick:
        args.model, prompts, generations, max_tokens, args.warmup, args.steps = "tiny", 2, 4, 8, 1, 1
    args.prompts = args.prompts or prompts
    args.generations = args.generations or generations
    args.max_tokens = args.max_tokens or max_tokens
    if args.precision == "auto":
        args.precision = "bf16" if cpu_has_bf16() else "fp32"
    if args.generations < 2:
        p.error("--generations must be >= 2: GRPO compares completions within a group")
    return args


# ---------------------------------------------------------------------------------------------- shared setup


def rllm_config(args: argparse.Namespace, run_dir: str) -> Any:
    from rllm.trainer.config import TrainConfig
    from rllm.utils.config import load_config

    bf16 = args.precision == "bf16"
    overrides = [
        f"model.path={args.model}",
        f"lora.enabled={str(not args.full_finetune).lower()}",
        f"lora.rank={args.lora_rank}",
        f"lora.alpha={args.lora_alpha}",
        "lora.target_modules=all-linear",
        "lora.dropout=0.0",
        f"rollout.batch_size={args.prompts}",
        f"rollout.group_size={args.generations}",
        f"rollout.max_tokens={args.max_tokens}",
        "rollout.temperature=1.0",
        "rollout.top_p=1.0",
        "rollout.top_k=0",
        "backend.device=cpu",
        f"backend.autocast={'bf16' if bf16 else 'none'}",
        f"backend.micro_batch_size={args.micro_batch}",
        "backend.gradient_checkpointing=false",
        "backend.old_logprobs=rollout",
        f"inference.dtype={'bfloat16' if bf16 else 'float32'}",
        "algorithm.advantage=grpo",
        "algorithm.norm_std=true",
        "algorithm.loss.kl_coef=0.0",
        "algorithm.filters.drop_zero_variance=false",
        f"optim.lr={args.lr}",
        "optim.schedule=constant",
        "optim.warmup_steps=0",
        "optim.grad_clip=1.0",
        f"data.train_size={max(200, args.prompts * (args.warmup + args.steps))}",
        f"trainer.steps={args.warmup + args.steps}",
        f"trainer.seed={args.seed}",
        f"trainer.run_dir={run_dir}",
        "trainer.loggers=[]",
    ]
    if args.threads:
        overrides.append(f"trainer.threads={args.threads}")
    return load_config(TrainConfig, None, overrides)


def step_tasks(args: argparse.Namespace, run_dir: str) -> list[list[dict[str, Any]]]:
    """The prompts of each step, in rllm's (seeded) order; TRL is fed exactly these, unshuffled."""
    from rllm.trainer.agent_trainer import AgentTrainer

    trainer = AgentTrainer(rllm_config(args, run_dir))
    return [trainer._tasks_for_step(s) for s in range(args.warmup + args.steps)]


def attach_dtype_probe(model: Any, seen: set[str], label: Any) -> None:
    """Record the output dtype of the first attention q_proj (the frozen base layer under LoRA) as
    ``"<label()>:<dtype>"``, so the table can say what precision each phase really ran in."""
    import torch

    for name, module in model.named_modules():
        if name.endswith("layers.0.self_attn.q_proj"):
            target = getattr(module, "base_layer", module)

            def hook(_m: Any, _inp: Any, out: torch.Tensor) -> None:
                seen.add(f"{label()}:{str(out.dtype).removeprefix('torch.')}")

            target.register_forward_hook(hook)
            return


def reward_last_number(completions: list[Any], answer: list[str], **_: Any) -> list[float]:
    """TRL reward: 1.0 when the reply's last number equals the answer (rllm's SingleTurnWorkflow reward)."""
    from rllm.rewards.basic import number_match

    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [float(number_match(t, a)) for t, a in zip(texts, answer, strict=True)]


# ---------------------------------------------------------------------------------------------- workers


def run_rllm(args: argparse.Namespace, run_dir: str) -> dict[str, Any]:
    import torch

    from rllm.trainer.agent_trainer import AgentTrainer

    trainer = AgentTrainer(rllm_config(args, run_dir))
    trainer._setup()  # the loader half of AgentTrainer.train(); we time train_step alone
    if args.full_length:
        trainer.train_sampling = trainer.train_sampling.model_copy(update={"ignore_eos": True})
    seen: set[str] = set()
    attach_dtype_probe(trainer.engine.model, seen, lambda: "generate")
    attach_dtype_probe(trainer.backend.model, seen, lambda: "train" if torch.is_grad_enabled() else "no_grad")
    loaded_mb = rss_mb()
    step_s, lengths = [], []
    with RssSampler() as sampler:
        for step in range(args.warmup + args.steps):
            t0 = time.perf_counter()
            metrics = trainer.train_step(step)
            step_s.append(time.perf_counter() - t0)
            lengths.append(metrics["response_len/mean"])
            if metrics.get("train/skipped"):
                raise RuntimeError("rllm skipped the update; the step would not be comparable")
    trainable = sum(p.numel() for p in trainer.backend.model.parameters() if p.requires_grad)
    return _result(args, step_s, lengths, loaded_mb, sampler.peak_mb, seen, trainable)


def run_trl(args: argparse.Namespace, run_dir: str) -> dict[str, Any]:
    import datasets
    import torch
    import trl
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

    tasks = [t for step in step_tasks(args, run_dir) for t in step]
    dataset = datasets.Dataset.from_list(
        [{"prompt": [{"role": "user", "content": t["question"]}], "answer": t["answer"]} for t in tasks]
    )
    total = args.prompts * args.generations
    # TRL counts completions, not prompts: one optimizer step = per_device * grad_accum completions,
    # generated together once per step (steps_per_generation defaults to gradient_accumulation_steps).
    per_device = args.micro_batch if total % args.micro_batch == 0 else total
    config = trl.GRPOConfig(
        output_dir=run_dir,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        seed=args.seed,
        use_cpu=True,
        bf16=args.precision == "bf16",
        fp16=False,
        gradient_checkpointing=False,
        max_steps=args.warmup + args.steps,
        per_device_train_batch_size=per_device,
        gradient_accumulation_steps=total // per_device,
        num_generations=args.generations,
        max_completion_length=args.max_tokens,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        generation_kwargs={"min_new_tokens": args.max_tokens} if args.full_length else None,
        beta=0.0,
        num_iterations=1,
        use_vllm=False,
        loss_type="dapo",
        scale_rewards="group",
        epsilon=0.2,
        epsilon_high=0.28,
        mask_truncated_completions=False,
        shuffle_dataset=False,
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
        log_completions=False,
    )
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
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    trainer = trl.GRPOTrainer(
        model=model,
        reward_funcs=reward_last_number,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=peft_config,
    )
    seen: set[str] = set()
    attach_dtype_probe(trainer.model, seen, lambda: "train" if torch.is_grad_enabled() else "generate")

    class StepClock(TrainerCallback):
        """End-to-end step times: from the previous step's end (or train start) to this step's end."""

        def __init__(self) -> None:
            self.marks: list[float] = []
            self.lengths: list[float] = []
            self.threads = 0

        def on_train_begin(self, *a: Any, **k: Any) -> None:
            self.marks.append(time.perf_counter())

        def on_step_end(self, *a: Any, **k: Any) -> None:
            self.marks.append(time.perf_counter())
            self.threads = torch.get_num_threads()

        def on_log(self, *a: Any, logs: dict[str, float] | None = None, **k: Any) -> None:
            if logs and "completions/mean_length" in logs:
                self.lengths.append(logs["completions/mean_length"])

    clock = StepClock()
    trainer.add_callback(clock)
    loaded_mb = rss_mb()
    with RssSampler() as sampler:
        trainer.train()
    step_s = [b - a for a, b in zip(clock.marks, clock.marks[1:], strict=False)]
    trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    result = _result(args, step_s, clock.lengths, loaded_mb, sampler.peak_mb, seen, trainable)
    result.update(trl_version=trl.__version__, trl_threads_in_step=clock.threads)
    return result


def _result(
    args: argparse.Namespace,
    step_s: list[float],
    lengths: list[float],
    loaded_mb: float,
    steps_peak_mb: float,
    seen: set[str],
    trainable: int,
) -> dict[str, Any]:
    import torch

    if len(step_s) != args.warmup + args.steps:
        raise RuntimeError(f"timed {len(step_s)} steps, expected {args.warmup + args.steps}")
    return {
        "warmup_s": step_s[: args.warmup],
        "step_s": step_s[args.warmup :],
        "completion_len_mean": lengths,
        "rss_loaded_mb": loaded_mb,
        "rss_peak_steps_mb": steps_peak_mb,
        "peak_rss_mb": peak_rss_mb(),
        "precision_seen": sorted(seen),
        "trainable_params": trainable,
        "threads": torch.get_num_threads(),
    }


def worker_main(args: argparse.Namespace) -> None:
    set_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix=f"rllm-bench-{args.worker}-") as run_dir:
        result = (run_rllm if args.worker == "rllm" else run_trl)(args, run_dir)
    write_result(args.result_file, result)


# ---------------------------------------------------------------------------------------------- parent


def main() -> None:
    args = parse_args()
    if args.worker:
        worker_main(args)
        return
    model_path = resolve_bench_model(args.model)
    common = forward_args(
        args,
        ["model", "prompts", "generations", "max_tokens", "warmup", "steps", "lora_rank", "lora_alpha",
         "precision", "micro_batch", "lr", "seed", "full_finetune", "full_length"],
        model=model_path,
    )
    common += ["--threads", str(args.threads)] if args.threads else []
    workers = [args.only] if args.only else list(WORKERS)
    results = {w: run_worker(__file__, w, common) for w in workers}

    mode = (
        "full fine-tune"
        if args.full_finetune
        else f"LoRA r={args.lora_rank} alpha={args.lora_alpha} all-linear"
    )
    precision = "fp32 weights + bf16 autocast" if args.precision == "bf16" else "fp32"
    lengths = "exactly" if args.full_length else "at most"
    print(
        f"\n## GRPO step: {args.model}, {args.prompts} prompts x {args.generations} completions x {lengths} "
        f"{args.max_tokens} tokens, {mode}, {precision}, micro-batch {args.micro_batch}"
    )
    print(f"machine: {machine_line()}")
    if "trl" in results:
        print(f"TRL {results['trl']['trl_version']}")
    print(f"median and min over {args.steps} steps after {args.warmup} warm-up step(s)\n")
    base = results.get("trl", {}).get("step_s")
    rows = []
    for w, r in results.items():
        med, lo = median_min(r["step_s"])
        rows.append(
            [
                w,
                f"{med:.2f}",
                f"{lo:.2f}",
                f"{statistics.mean(r['warmup_s']):.2f}",
                f"{r['peak_rss_mb']:.0f}",
                f"{r['rss_peak_steps_mb']:.0f}",
                f"{r['rss_loaded_mb']:.0f}",
                f"{statistics.mean(r['completion_len_mean']):.1f}" if r["completion_len_mean"] else "-",
                f"{med / statistics.median(base):.2f}" if base else "-",
                str(r["threads"]),
            ]
        )
    print(
        markdown_table(
            [
                "framework",
                "s/step median",
                "s/step min",
                "warm-up s",
                "peak RSS MB",
                "peak RSS MB (steps)",
                "RSS MB before steps",
                "mean completion len",
                "s/step vs TRL",
                "threads",
            ],
            rows,
        )
    )
    print("\nprecision observed (phase:dtype of the first q_proj output):")
    for w, r in results.items():
        seen = ", ".join(r["precision_seen"]) or "not probed"
        print(f"  {w}: {seen}; trainable params {r['trainable_params']:,}")
    if args.precision == "bf16" and any(
        "generate:float32" in r["precision_seen"] or "train:float32" in r["precision_seen"]
        for r in results.values()
    ):
        print("  note: a phase ran in float32 although bf16 was asked for: the precisions differ there")


if __name__ == "__main__":
    main()
