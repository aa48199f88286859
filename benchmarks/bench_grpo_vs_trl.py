"""One GRPO optimizer step, rllm vs TRL's ``GRPOTrainer``: seconds per step, where they go, peak memory.

Both frameworks get the same model, the same prompts in the same order (chat-templated "which number is
larger" tasks, the messages rllm's SingleTurnWorkflow sends), the same group size, prompts per step,
completion length, sampling (temperature 1.0, no top-k / top-p), LoRA (r=32, alpha=64, all linear layers;
or ``--full-finetune``), micro-batch size, AdamW settings, gradient clipping, and the same reward function
(``_common.grpo_reward``: rllm's number reward, called by both). No reference model in either (rllm
``kl_coef=0``, TRL ``beta=0``), one gradient step per batch (TRL ``num_iterations=1``), no gradient
checkpointing (TRL turns it on by default; we turn it off to match rllm's default).

Two settings (``--precision``, default ``both``: each runs in turn):

- ``fp32``, **like for like**: fp32 weights and compute everywhere on both sides, and the same attention
  kernel in training (eager, what rllm picks on CPU). The headline ratio is this one.
- ``best``, each side's best settings: rllm samples from its bf16 engine copy and trains under bf16
  autocast; TRL ``bf16=True`` with its default (SDPA) attention.

A step is everything from taking the prompts to being ready to sample the next batch: generation,
reward, advantages, forward/backward, optimizer step, and for rllm the weight sync into its inference
engine. rllm keeps every group (``drop_zero_variance=false``) so it never skips a backward that TRL does.
The first ``--warmup`` steps are not timed; the table reports the median and min of the next ``--steps``.
Each step is also split into phases: generate (rllm: its engine's decode time; TRL: its own
``transformers.generate`` timing), train (forward + backward + optimizer step) and other (reward,
advantages, batching, weight sync), with the decode steps (the longest completion of the step's one
batch) and the generated tokens. Each framework runs in its own subprocess, so its peak RSS is its own.

    python benchmarks/bench_grpo_vs_trl.py                     # 2 prompts x 4 completions x 32 tokens
    python benchmarks/bench_grpo_vs_trl.py --preset larger     # 8 prompts x 8 completions x 32 tokens
    python benchmarks/bench_grpo_vs_trl.py --quick             # plumbing check: tiny model, 1 step
"""

from __future__ import annotations

import argparse
import tempfile
import time
from typing import Any

from _common import (
    PhaseClock,
    RssSampler,
    cpu_has_bf16,
    forward_args,
    grpo_reward,
    peak_rss_mb,
    resolve_bench_model,
    rss_mb,
    run_worker,
    set_threads,
    write_result,
)
from _grpo_report import SETTINGS, print_report

WORKERS = ("rllm", "trl")
PRESETS = {"default": (2, 4, 32), "larger": (8, 8, 32)}  # prompts per step, completions per prompt, tokens
TRL_TIMING_GENERATE = "GRPOTrainer.transformers.generate"  # TRL's own profiling names (trl.extras.profiling)
TRL_TIMING_PREPARE = "GRPOTrainer._prepare_inputs"  # generation + reward + advantages, per micro-batch


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (``argv``, default ``sys.argv[1:]``): also how ``bench_openmp`` builds this
    benchmark's settings, so the two share its defaults."""
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
        "--stop-at-eos",
        action="store_true",
        help="let completions end at eos (the real workload; lengths then differ between the sides, so the "
        "ratio is not like for like). Default: every completion exactly --max-tokens long on both sides "
        "(rllm ignore_eos, TRL min_new_tokens)",
    )
    p.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    p.add_argument("--steps", type=int, default=5, help="timed steps after the warm-up")
    p.add_argument("--full-finetune", action="store_true", help="train all weights instead of LoRA")
    p.add_argument("--lora-rank", type=int, default=32)
    p.add_argument("--lora-alpha", type=int, default=64)
    p.add_argument(
        "--precision",
        choices=["both", *SETTINGS],
        default="both",
        help="fp32: like for like (the headline); best: each side's best settings; both (default): fp32 then best",
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
        help="plumbing check: tiny random model, 2 prompts x 4 completions x 8 tokens, 1 + 1 steps, both settings",
    )
    p.add_argument("--worker", choices=WORKERS, help=argparse.SUPPRESS)
    p.add_argument("--result-file", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    prompts, generations, max_tokens = PRESETS[args.preset]
    if args.quick:
        args.model, prompts, generations, max_tokens, args.warmup, args.steps = "tiny", 2, 4, 8, 1, 1
    args.prompts = args.prompts or prompts
    args.generations = args.generations or generations
    args.max_tokens = args.max_tokens or max_tokens
    args.full_length = not args.stop_at_eos
    if args.generations < 2:
        p.error("--generations must be >= 2: GRPO compares completions within a group")
    if args.worker and args.precision == "both":
        p.error("a worker runs one setting: --precision fp32 or best")
    return args


# ---------------------------------------------------------------------------------------------- shared setup


def rllm_config(args: argparse.Namespace, run_dir: str) -> Any:
    from rllm.trainer.config import TrainConfig
    from rllm.utils.config import load_config

    bf16 = args.precision == "best"
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
        "backend.attn_implementation=eager",  # what rllm's `auto` picks on CPU; TRL's fp32 run matches it
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


def bench_trainer(args: argparse.Namespace, run_dir: str) -> Any:
    """rllm's trainer for this benchmark: the built-in task's data in its seeded order, scored by
    ``grpo_reward`` through a SingleTurnWorkflow (the question as the one user message, no instruction)."""
    from rllm.trainer.agent_trainer import AgentTrainer
    from rllm.workflows.single_turn import SingleTurnWorkflow

    return AgentTrainer(rllm_config(args, run_dir), workflow=SingleTurnWorkflow(reward_fn=grpo_reward))


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


def attention_kernel(model: Any) -> str:
    return str(getattr(model.config, "_attn_implementation", "?"))


# ---------------------------------------------------------------------------------------------- workers


def run_rllm(args: argparse.Namespace, run_dir: str) -> dict[str, Any]:
    import torch

    trainer = bench_trainer(args, run_dir)
    trainer._setup()  # the loader half of AgentTrainer.train(); we time train_step alone
    if args.full_length:
        trainer.train_sampling = trainer.train_sampling.model_copy(update={"ignore_eos": True})
    seen: set[str] = set()
    attach_dtype_probe(trainer.engine.model, seen, lambda: "generate")
    attach_dtype_probe(trainer.backend.model, seen, lambda: "train" if torch.is_grad_enabled() else "no_grad")
    clock = PhaseClock()
    clock.wrap(trainer.backend, "forward_backward", "train")
    clock.wrap(trainer.backend, "optim_step", "train")
    clock.wrap(trainer.backend, "sync_weights_to", "sync")
    engine_stats = trainer.engine.stats
    loaded_mb = rss_mb()
    step_s, lengths, phases = [], [], []
    with RssSampler() as sampler:
        for step in range(args.warmup + args.steps):
            before = dict(engine_stats)
            t0 = time.perf_counter()
            metrics = trainer.train_step(step)
            step_s.append(time.perf_counter() - t0)
            timed = clock.end_step()
            lengths.append(metrics["response_len/mean"])
            if metrics.get("train/skipped"):
                raise RuntimeError("rllm skipped the update; the step would not be comparable")
            generate = engine_stats["decode_s"] - before["decode_s"]  # prefill + decode in the engine
            phases.append(
                {
                    "generate_s": generate,
                    "train_s": timed.get("train", 0.0),
                    "sync_s": timed.get("sync", 0.0),
                    "other_s": step_s[-1] - generate - timed.get("train", 0.0),
                    "decode_batches": engine_stats["batches"] - before["batches"],
                    "decode_steps": metrics["response_len/max"],
                    "generated_tokens": engine_stats["generated_tokens"] - before["generated_tokens"],
                }
            )
    shared = engine_stats["shared_prefill_rows"]
    print(
        f"  engine: {engine_stats['rows']:.0f} rows prefilled, {shared:.0f} of them copied from a row of the same prompt"
    )
    trainable = sum(p.numel() for p in trainer.backend.model.parameters() if p.requires_grad)
    result = _result(args, step_s, lengths, loaded_mb, sampler.peak_mb, seen, trainable, phases)
    result["attention"] = f"engine: rllm's own; training: {attention_kernel(trainer.backend.model)}"
    return result


class TrlTimings:
    """TRL's own phase timings: every ``profiling_context`` / ``profiling_decorator`` duration TRL measures
    (it sends them only to W&B / MLflow / trackio), recorded here as ``(name, seconds)``."""

    def __init__(self) -> None:
        from trl.extras import profiling

        self.events: list[tuple[str, float]] = []
        original = profiling.ProfilingContext._log_metrics
        events = self.events

        def record(ctx: Any, duration: float) -> None:
            events.append((ctx.name, duration))
            original(ctx, duration)

        profiling.ProfilingContext._log_metrics = record

    def drain(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for name, seconds in self.events:
            out[name] = out.get(name, 0.0) + seconds
        self.events.clear()
        return out


def run_trl(args: argparse.Namespace, run_dir: str) -> dict[str, Any]:
    import datasets
    import torch
    import trl
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

    rllm_trainer = bench_trainer(args, run_dir)
    tasks = [t for s in range(args.warmup + args.steps) for t in rllm_trainer._tasks_for_step(s)]
    by_id = {t["task_id"]: t for t in tasks}
    messages = rllm_trainer.workflow.messages  # the prompt rllm's workflow sends, message for message
    dataset = datasets.Dataset.from_list([{"prompt": messages(t), "task_id": t["task_id"]} for t in tasks])

    def reward(completions: list[Any], task_id: list[str], **_: Any) -> list[float]:
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [grpo_reward(by_id[i], text) for i, text in zip(task_id, texts, strict=True)]

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
        bf16=args.precision == "best",
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
    # Like for like: rllm's training attention kernel; best: transformers' default (SDPA).
    attn = {"attn_implementation": "eager"} if args.precision == "fp32" else {}
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32, **attn)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    trainer = trl.GRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=peft_config,
    )
    seen: set[str] = set()
    attach_dtype_probe(trainer.model, seen, lambda: "train" if torch.is_grad_enabled() else "generate")
    timings = TrlTimings()

    class StepClock(TrainerCallback):
        """End-to-end step times (from the previous step's end, or train start, to this step's end) and
        each step's phases: generate = TRL's transformers.generate timing; train = the optimizer step's
        span (on_step_begin to on_step_end) less TRL's _prepare_inputs (generation and scoring);
        other = the rest (reward, advantages, batching, logging)."""

        def __init__(self) -> None:
            self.marks: list[float] = []
            self.step_begin = 0.0
            self.lengths: list[float] = []
            self.max_lengths: list[float] = []
            self.phases: list[dict[str, float]] = []
            self.threads = 0

        def on_train_begin(self, *a: Any, **k: Any) -> None:
            self.marks.append(time.perf_counter())

        def on_step_begin(self, *a: Any, **k: Any) -> None:
            self.step_begin = time.perf_counter()

        def on_step_end(self, *a: Any, **k: Any) -> None:
            now = time.perf_counter()
            self.marks.append(now)
            self.threads = torch.get_num_threads()
            timed = timings.drain()
            if TRL_TIMING_GENERATE not in timed or TRL_TIMING_PREPARE not in timed:
                raise RuntimeError(
                    f"TRL {trl.__version__} did not report {TRL_TIMING_GENERATE!r} and {TRL_TIMING_PREPARE!r} "
                    f"timings (it reported {sorted(timed)}): update the names in bench_grpo_vs_trl.py"
                )
            generate = timed[TRL_TIMING_GENERATE]
            train = (now - self.step_begin) - timed[TRL_TIMING_PREPARE]
            step = now - self.marks[-2]
            self.phases.append(
                {"generate_s": generate, "train_s": train, "sync_s": 0.0, "other_s": step - generate - train}
            )

        def on_log(self, *a: Any, logs: dict[str, float] | None = None, **k: Any) -> None:
            if logs and "completions/mean_length" in logs:
                self.lengths.append(logs["completions/mean_length"])
                self.max_lengths.append(logs["completions/max_length"])

    clock = StepClock()
    trainer.add_callback(clock)
    loaded_mb = rss_mb()
    with RssSampler() as sampler:
        trainer.train()
    step_s = [b - a for a, b in zip(clock.marks, clock.marks[1:], strict=False)]
    for phase, mean_len, max_len in zip(clock.phases, clock.lengths, clock.max_lengths, strict=True):
        # One generate call per step decodes all P x G rows until the longest one ends.
        phase.update(decode_batches=1, decode_steps=max_len, generated_tokens=mean_len * total)
    trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    result = _result(args, step_s, clock.lengths, loaded_mb, sampler.peak_mb, seen, trainable, clock.phases)
    result.update(
        trl_version=trl.__version__,
        trl_threads_in_step=clock.threads,
        attention=f"generate and training: {attention_kernel(trainer.model)}",
    )
    return result


def _result(
    args: argparse.Namespace,
    step_s: list[float],
    lengths: list[float],
    loaded_mb: float,
    steps_peak_mb: float,
    seen: set[str],
    trainable: int,
    phases: list[dict[str, float]],
) -> dict[str, Any]:
    import torch

    if not len(step_s) == len(phases) == args.warmup + args.steps:
        raise RuntimeError(
            f"timed {len(step_s)} steps ({len(phases)} profiled), expected {args.warmup + args.steps}"
        )
    return {
        "warmup_s": step_s[: args.warmup],
        "step_s": step_s[args.warmup :],
        "phases": phases[args.warmup :],
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
        [
            "model",
            "prompts",
            "generations",
            "max_tokens",
            "warmup",
            "steps",
            "lora_rank",
            "lora_alpha",
            "micro_batch",
            "lr",
            "seed",
            "full_finetune",
            "stop_at_eos",
        ],
        model=model_path,
    )
    common += ["--threads", str(args.threads)] if args.threads else []
    workers = [args.only] if args.only else list(WORKERS)
    settings = list(SETTINGS) if args.precision == "both" else [args.precision]
    if "best" in settings and not cpu_has_bf16():
        # rllm refuses bf16 autocast on a CPU without native bf16 (it would be emulated, and slower).
        if args.precision == "best":
            raise SystemExit("--precision best needs a CPU with native bf16 (AVX512-BF16 / AMX); use fp32")
        print("this CPU has no native bf16: running the fp32 (like for like) setting only")
        settings = ["fp32"]
    results = {
        (w, s): run_worker(__file__, w, [*common, "--precision", s]) for s in settings for w in workers
    }
    print_report(args, results, settings)


if __name__ == "__main__":
    main()
