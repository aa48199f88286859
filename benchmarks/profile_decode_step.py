"""Where one decode step of the local engine spends its time: torch.profiler's per-op self CPU time over a few
decode steps of a batch of B rows, and an interleaved A/B of the step time against the same engine with its
CPU kernel choices undone (``rllm.inference.cpu_kernels``: fp32 GEMMs for bf16 on CPUs without native bf16,
decode attention without ``repeat_kv``; ``rllm.inference.small_gemm``: float32 products of 3-8 rows).

Both engines load the same model in one process and decode the same chat prompts at temperature 1; their
steps alternate in rounds of 4 (so machine load hits both alike) and the median step time is reported.
The profile covers ``--steps`` steps of the engine as it is (``--profile baseline`` profiles the other).
Last, the step's matrix products alone (:func:`gemm_floor`): every linear weight times a ``[B, in]`` input,
back to back, so the step's time can be read against what torch's GEMMs take over the same weights; the
same at one row, where reading the weights from memory bounds the products; and, for 1-8 float32 rows, the
same products through rllm's small-batch GEMM.

    python benchmarks/profile_decode_step.py                          # bf16, B = 32, 1 thread
    python benchmarks/profile_decode_step.py --dtype float32 --threads 2
    python benchmarks/profile_decode_step.py --quick                  # tiny model, B = 4: the CI plumbing check
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from _common import chat_prompt_ids, machine_line, resolve_bench_model
from torch.profiler import ProfilerActivity, profile

from rllm.inference.base import SamplingParams
from rllm.inference.local import LocalEngine, _Row
from rllm.inference.small_gemm import small_gemm


def undo_cpu_kernels(engine: LocalEngine) -> None:
    """Put the engine's model back on transformers' own kernels (bf16 GEMMs, SDPA with ``repeat_kv``)."""
    if engine._fp32_gemm is not None:
        for linear, _, _ in engine._fp32_gemm.linears:
            del linear.forward  # the instance attribute; nn.Linear.forward is back
        engine._fp32_gemm = None
    if engine.small_gemm is not None:
        engine.small_gemm.active = False
    engine.model.set_attn_implementation("sdpa")


def gemm_floor(
    model: torch.nn.Module, batch: int, repeats: int, product: Callable[..., torch.Tensor] = F.linear
) -> tuple[float, int]:
    """The products of one decode step alone: every ``nn.Linear`` weight of ``model`` (the LM head included),
    in model order, times a ``[batch, in]`` input, as plain ``product`` calls (``F.linear``, or rllm's
    ``small_gemm``) with nothing between them.
    Returns the median seconds a pass and the bytes of weight it reads. The weights are the model's own
    (hundreds of MB), so each pass reads them from memory, as a decode step does."""
    weights = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]
    inputs = {w.shape[1]: torch.randn(batch, w.shape[1], dtype=w.dtype) for w in weights}
    passes = []
    for r in range(repeats + 1):  # pass 0 warms up
        t0 = time.perf_counter()
        for w in weights:
            product(inputs[w.shape[1]], w)
        if r:
            passes.append(time.perf_counter() - t0)
    return statistics.median(passes), sum(w.numel() * w.element_size() for w in weights)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--quick", action="store_true", help="tiny model, B = 4, 1 round, 2 steps: the CI plumbing check"
    )
    p.add_argument("--model", default=None, help="model (default smollm2-135m; --quick: tiny)")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    p.add_argument("--batch", type=int, default=32, help="rows decoding together")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (1: least sensitive to load)")
    p.add_argument("--rounds", type=int, default=6, help="A/B rounds of 4 decode steps per engine")
    p.add_argument("--steps", type=int, default=6, help="decode steps profiled")
    p.add_argument("--profile", choices=["engine", "baseline"], default="engine")
    p.add_argument("--rows", type=int, default=20, help="ops shown in the profile table")
    args = p.parse_args()
    if args.quick:
        args.batch, args.rounds, args.steps = min(args.batch, 4), 1, 2
    torch.set_num_threads(args.threads)
    path = resolve_bench_model(args.model or ("tiny" if args.quick else "smollm2-135m"))
    engines = {
        "engine": LocalEngine.from_pretrained(path, device="cpu", dtype=args.dtype),
        "baseline": LocalEngine.from_pretrained(path, device="cpu", dtype=args.dtype),
    }
    undo_cpu_kernels(engines["baseline"])
    tok = engines["engine"].tokenizer
    prompts = [
        chat_prompt_ids(tok, f"Which number is larger, {i * 7 % 97} or {i * 13 % 89}? Answer briefly.")
        for i in range(args.batch)
    ]
    loop = asyncio.new_event_loop()

    def rows() -> list[_Row]:
        params = [
            SamplingParams(temperature=1.0, max_tokens=10**4, ignore_eos=True, seed=i)
            for i in range(args.batch)
        ]
        return [
            _Row(pr, pa, torch.Generator().manual_seed(i), loop.create_future(), loop)
            for i, (pr, pa) in enumerate(zip(prompts, params))
        ]

    print(machine_line())
    times: dict[str, list[float]] = {name: [] for name in engines}
    with torch.inference_mode():
        batches = {name: e._prefill(rows()) for name, e in engines.items()}
        for r in range(args.rounds + 1):  # round 0 warms up
            for name in list(engines)[:: 1 if r % 2 else -1]:
                t0 = time.perf_counter()
                for _ in range(4):
                    batches[name] = engines[name]._decode_step(batches[name])
                if r:
                    times[name].append((time.perf_counter() - t0) / 4)
        new, old = statistics.median(times["engine"]), statistics.median(times["baseline"])
        print(
            f"{args.dtype}, B={args.batch}, {args.threads} thread(s), cache width {batches['engine'].width}: "
            f"baseline {old * 1e3:.0f} ms/step ({args.batch / old:.1f} tok/s), engine {new * 1e3:.0f} ms/step "
            f"({args.batch / new:.1f} tok/s), {old / new:.2f}x"
        )
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(args.steps):
                batches[args.profile] = engines[args.profile]._decode_step(batches[args.profile])
    print(f"profile of {args.steps} decode steps ({args.profile}):")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))
    with torch.inference_mode():
        floor, nbytes = gemm_floor(engines["baseline"].model, args.batch, 2 if args.quick else 10)
        one_row, _ = gemm_floor(engines["baseline"].model, 1, 2 if args.quick else 10)
    print(
        f"the step's products alone (F.linear over every linear weight, {nbytes / 1e6:.0f} MB, B={args.batch}): "
        f"{floor * 1e3:.1f} ms, {nbytes / floor / 1e9:.1f} GB/s of weights"
    )
    # One row is a matrix-vector product, bound by reading the weights: the rate memory gives here, so the
    # B-row figure reads against it (above it, the GEMM kernel rather than memory sets the step's products).
    print(
        f"the same at B=1 (reading the weights once): {one_row * 1e3:.1f} ms, {nbytes / one_row / 1e9:.1f} GB/s; "
        f"B={args.batch} takes {floor / one_row:.2f}x that"
    )
    if engines["engine"].small_gemm is not None and 1 <= args.batch <= 8:
        with torch.inference_mode():
            ours, _ = gemm_floor(engines["baseline"].model, args.batch, 2 if args.quick else 10, small_gemm)
        print(
            f"the same through rllm's small-batch GEMM (rllm.inference.small_gemm), B={args.batch}: "
            f"{ours * 1e3:.1f} ms, {nbytes / ours / 1e9:.1f} GB/s, {floor / ours:.2f}x torch's"
        )


if __name__ == "__main__":
    main()
