"""Sampling throughput of the local engine serving several LoRA adapters at once, vs merged weights.

For each batch size B, the engine samples B chat-templated questions at temperature 1.0, each row exactly
``--max-new-tokens`` tokens (``ignore_eos``), in four set-ups on the same model and dtype:

- ``merged``: a plain engine (one policy, its LoRA merged into the weights: what ``load_weights`` serves);
- ``0 adapters``: an engine with two adapters loaded, every row without one (the per-row delta is skipped);
- ``1 adapter``: every row with adapter ``a``;
- ``2 adapters``: rows alternate between adapters ``a`` and ``b`` in one batch.

The adapters are random, rank ``--rank`` on every linear layer of the decoder (rllm's default
``lora.target_modules=all-linear``, ``lora.rank=32``). Tokens/s counts generated tokens, prefill included;
one warm-up run per point, then ``--repeats`` rounds that time the four set-ups in turn (so load from
other processes falls on all of them alike), median reported.

    python benchmarks/bench_adapters.py                 # smollm2-135m, B = 8, 32, 32 tokens
    python benchmarks/bench_adapters.py --quick         # plumbing check: tiny model, B = 2, 4, 4 tokens
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from _common import (
    chat_prompt_ids,
    header_line,
    machine_line,
    markdown_table,
    resolve_bench_model,
    set_threads,
)

SETUPS = ("merged", "0 adapters", "1 adapter", "2 adapters")
LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m", help="built-in name, model directory, or 'tiny'")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"], help="weight dtype")
    p.add_argument("--batch-sizes", default="8,32", help="comma-separated batch sizes")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--rank", type=int, default=32, help="LoRA rank of the random adapters")
    p.add_argument("--repeats", type=int, default=2, help="timed runs per point, after one warm-up run")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--quick", action="store_true", help="plumbing check: tiny model, B = 2, 4, 4 tokens")
    args = p.parse_args()
    if args.quick:
        args.model, args.batch_sizes, args.max_new_tokens, args.repeats = "tiny", "2,4", 4, 1
    return args


def random_adapters(model: Any, rank: int, names: list[str]) -> dict[str, dict[str, tuple[Any, Any]]]:
    """``{adapter: {module name: (A [r, in], B [out, r])}}`` for every decoder linear layer, seeded."""
    import torch

    gen = torch.Generator().manual_seed(0)
    out: dict[str, dict[str, tuple[Any, Any]]] = {}
    for name in names:
        out[name] = {}
        for module_name, module in model.named_modules():
            if isinstance(module, torch.nn.Linear) and module_name.rsplit(".", 1)[-1] in LINEAR:
                a = torch.randn(rank, module.in_features, generator=gen) * 0.01
                b = torch.randn(module.out_features, rank, generator=gen) * 0.01
                out[name][module_name] = (a, b)
    return out


def tokens_per_s(
    engine: Any, prompts: list[list[int]], b: int, adapters: list[str | None], args: Any
) -> float:
    """Tokens/s of one batch of ``b`` rows (row ``i`` with ``adapters[i % len(adapters)]``)."""
    from rllm.inference.base import SamplingParams

    params = SamplingParams(temperature=1.0, max_tokens=args.max_new_tokens, ignore_eos=True, seed=0)

    async def run() -> None:
        await asyncio.gather(
            *(
                engine.generate(prompts[i % len(prompts)], params, adapter=adapters[i % len(adapters)])
                for i in range(b)
            )
        )

    t0 = time.perf_counter()
    asyncio.run(run())
    return b * args.max_new_tokens / (time.perf_counter() - t0)


def main() -> None:
    args = parse_args()
    set_threads(args.threads)
    from rllm.inference.local import LocalEngine

    path = resolve_bench_model(args.model)
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    merged = LocalEngine.from_pretrained(
        path, device="cpu", dtype=args.dtype, max_batch_rows=max(batch_sizes)
    )
    served = LocalEngine.from_pretrained(
        path, device="cpu", dtype=args.dtype, max_batch_rows=max(batch_sizes)
    )
    served.load_adapters(random_adapters(served.model, args.rank, ["a", "b"]), scaling=2.0, version=1)
    questions = [f"Which number is larger, {i * 7 % 100} or {i * 13 % 100}?" for i in range(max(batch_sizes))]
    prompts = [chat_prompt_ids(merged.tokenizer, q) for q in questions]
    print(header_line())
    print(machine_line())
    rows = []
    for b in batch_sizes:
        setups = {
            "merged": (merged, [None]),
            "0 adapters": (served, [None]),
            "1 adapter": (served, ["a"]),
            "2 adapters": (served, ["a", "b"]),
        }
        timed: dict[str, list[float]] = {s: [] for s in SETUPS}
        for round_ in range(args.repeats + 1):  # round 0 is the warm-up
            for s, (engine, adapters) in setups.items():
                rate = tokens_per_s(engine, prompts, b, adapters, args)
                if round_:
                    timed[s].append(rate)
        rates = {s: statistics.median(v) for s, v in timed.items()}
        rows.append(
            [str(b)] + [f"{rates[s]:.0f}" for s in SETUPS] + [f"{rates['2 adapters'] / rates['merged']:.2f}"]
        )
    print(
        f"\n{args.model} {args.dtype}, {args.max_new_tokens} tokens per row, LoRA rank {args.rank} on "
        f"every decoder linear layer; tokens/s (median of {args.repeats})\n"
    )
    print(markdown_table(["batch", *(f"{s} tok/s" for s in SETUPS), "2 adapters / merged"], rows))


if __name__ == "__main__":
    main()
