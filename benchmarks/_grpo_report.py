"""The printed summary of bench_grpo_vs_trl.py: the side-by-side table, the like-for-like headline, the
best-settings ratio beside it, the per-phase profile (medians and every timed step), and the precision and
attention each side really ran with."""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from _common import header_line, machine_line, markdown_table, median_min

SETTINGS = {
    "fp32": "like for like: fp32 weights and compute on both sides, eager attention in training on both",
    "best": "each side's best: rllm bf16 engine + bf16 autocast; TRL bf16=True, its default SDPA attention",
}
TARGET_RATIO = 0.5  # rllm's s/step at most half of TRL's, like for like


def ratio_line(results: dict[tuple[str, str], Any], setting: str) -> tuple[float, str] | None:
    """rllm's median s/step over TRL's under one setting, and a sentence saying so; None without both."""
    ours, theirs = results.get(("rllm", setting)), results.get(("trl", setting))
    if not ours or not theirs:
        return None
    a, b = statistics.median(ours["step_s"]), statistics.median(theirs["step_s"])
    return a / b, f"rllm {a:.2f} s vs TRL {b:.2f} s per step = {a / b:.2f}x TRL's time"


def generated_tokens(result: dict[str, Any]) -> float:
    """The median generated tokens per timed step of one worker's result."""
    return statistics.median(p["generated_tokens"] for p in result["phases"])


def equal_work(results: dict[tuple[str, str], Any], setting: str) -> bool:
    """Whether rllm and TRL generated the same number of tokens per step under ``setting`` (what makes
    a ratio of their step times compare equal work: decoding and training cost grow with the tokens)."""
    ours, theirs = results.get(("rllm", setting)), results.get(("trl", setting))
    return bool(ours and theirs) and round(generated_tokens(ours)) == round(generated_tokens(theirs))


def phase_rows(results: dict[tuple[str, str], Any]) -> tuple[list[list[str]], list[list[str]]]:
    """The median phase split per (framework, setting), and every timed step's split."""

    def cells(p: dict[str, float]) -> list[str]:
        tokens_per_step = p["generated_tokens"] / p["decode_steps"] if p["decode_steps"] else float("nan")
        return [
            f"{p['generate_s'] + p['train_s'] + p['other_s']:.2f}",
            f"{p['generate_s']:.2f}",
            f"{p['train_s']:.2f}",
            f"{p['other_s']:.2f}",
            f"{p['sync_s']:.2f}",
            f"{p['decode_steps']:.0f}",
            f"{p['decode_batches']:.0f}",
            f"{p['generated_tokens']:.0f}",
            f"{tokens_per_step:.1f}",
        ]

    medians, steps = [], []
    for (w, setting), r in results.items():
        keys = r["phases"][0].keys()
        median = {k: statistics.median(p[k] for p in r["phases"]) for k in keys}
        medians.append([w, setting, *cells(median)])
        steps += [[w, setting, str(i + 1), *cells(p)] for i, p in enumerate(r["phases"])]
    return medians, steps


PHASE_HEADERS = [
    "step s",
    "generate s",
    "train fwd+bwd+optim s",
    "other s",
    "of which weight sync s",
    "decode steps",
    "decode batches",
    "generated tokens",
    "tokens per decode step",
]


def print_report(args: argparse.Namespace, results: dict[tuple[str, str], Any], settings: list[str]) -> None:
    """Print every table of one run; ``results`` maps (framework, setting) to a worker's JSON."""
    mode = (
        "full fine-tune"
        if args.full_finetune
        else f"LoRA r={args.lora_rank} alpha={args.lora_alpha} all-linear"
    )
    lengths = "exactly" if args.full_length else "at most"
    print(
        f"\n## GRPO step: {args.model}, {args.prompts} prompts x {args.generations} completions x {lengths} "
        f"{args.max_tokens} tokens, {mode}, micro-batch {args.micro_batch}"
    )
    print(header_line())
    print(machine_line())
    trl_versions = {r["trl_version"] for (w, _), r in results.items() if w == "trl"}
    if trl_versions:
        print(f"TRL {', '.join(sorted(trl_versions))}")
    print(f"median and min over {args.steps} steps after {args.warmup} warm-up step(s)\n")
    rows = []
    for (w, setting), r in results.items():
        med, lo = median_min(r["step_s"])
        base = results.get(("trl", setting), {}).get("step_s")
        rows.append(
            [
                w,
                setting,
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
                "settings",
                "s/step median",
                "s/step min",
                "warm-up s",
                "peak RSS MB",
                "peak RSS MB (steps)",
                "RSS MB before steps",
                "mean completion len",
                "s/step vs TRL (same settings)",
                "threads",
            ],
            rows,
        )
    )
    print()
    for setting in settings:
        print(f"settings {setting}: {SETTINGS[setting]}")
    headline = ratio_line(results, "fp32")
    if headline and equal_work(results, "fp32"):
        ratio, sentence = headline
        verdict = "PASS" if ratio <= TARGET_RATIO else "FAIL"
        print(
            "\n**Like for like (fp32 on both sides, equal generated tokens): "
            f"{sentence} (target <= {TARGET_RATIO:g}x: {verdict})**"
        )
    elif headline:
        ours, theirs = (generated_tokens(results[(w, "fp32")]) for w in ("rllm", "trl"))
        print(
            f"\nfp32 on both sides, NOT like for like: rllm generated {ours:.0f} tokens per step, TRL "
            f"{theirs:.0f} (completions stop at eos; drop --stop-at-eos for equal lengths): {headline[1]}"
        )
    else:
        print("\nLike for like (fp32 on both sides): not measured in this run (run --precision fp32 or both)")
    best = ratio_line(results, "best")
    if best:
        print(f"Each side's best settings (precisions differ, see below; not the headline): {best[1]}")

    medians, steps = phase_rows(results)
    print("\n### Where a step's time goes (median of the timed steps)\n")
    print(
        "generate: rllm's engine decode time / TRL's own transformers.generate timing; train: forward + "
        "backward + optimizer step; other: the rest of the step (reward, advantages, batching; rllm: the "
        "weight sync, shown on its own too). decode steps: the longest completion of the step's batch.\n"
    )
    print(markdown_table(["framework", "settings", *PHASE_HEADERS], medians))
    print("\nevery timed step:\n")
    print(markdown_table(["framework", "settings", "step", *PHASE_HEADERS], steps))
    print("\nattention kernels and precision observed (phase:dtype of the first q_proj output):")
    for (w, setting), r in results.items():
        seen = ", ".join(r["precision_seen"]) or "not probed"
        print(f"  {w} {setting}: {r['attention']}; {seen}; trainable params {r['trainable_params']:,}")
    if any("generate:float32" in r["precision_seen"] for (_, s), r in results.items() if s == "best"):
        print(
            "  note: under 'best' a phase ran in float32 although bf16 was asked for: the precisions differ there"
        )
