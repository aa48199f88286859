"""Training step time: the distributed backend (FSDP2 ranks as Ray actors) vs the local backend, same batch.

One optimizer step = ``forward_backward`` over the batch + ``optim_step``, timed from the trainer's side
(for the distributed backend that includes shipping the batch to the ranks and the metrics back). The
batch: ``--batch`` sequences of distinct random prompts (so the local backend's shared-prefix forward,
which the ranks do not use, changes nothing), ``--prompt-tokens`` + ``--response-tokens`` each, +-1
advantages. One untimed warm-up step, then ``--steps`` timed ones; median and min reported. Each setting
runs in its own subprocess (its own Ray cluster, its own peak memory):

- ``local``: LocalBackend, torch's default threads (one per core);
- ``dist1``: DistributedBackend at world size 1, one rank with ``cpus_per_rank`` = all cores (the
  overhead the target is about: Ray + FSDP2 + collectives around the same math, ≤ 10 %);
- ``dist2``: world size 2, one core per rank (for information: on one CPU box the ranks split the same
  cores, so this shows the cost of the extra gloo collectives, not a speed-up).

For the distributed settings the table also gives the ranks' time in collectives per step (the backend's
``profile/collective_*`` metrics, read after each timed step: docs/profiling.md): in flight, exposed (the
ranks waited), that over the ranks' working time, and the seconds spent reading the profiler's events.
``--profile-collectives`` turns the measurement on (``backend.distributed.profile_collectives=true``; off
by default, as in the config), so a run with and one without give what it costs.

    python benchmarks/bench_distributed.py               # random-init SmolLM2-135M shape, full fine-tune
    python benchmarks/bench_distributed.py --lora        # the same with LoRA r=16
    python benchmarks/bench_distributed.py --quick       # plumbing check: tiny model, seconds
    python benchmarks/bench_distributed.py --only dist2 --profile-collectives   # with the time in collectives
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import (
    forward_args,
    header_line,
    machine_line,
    markdown_table,
    peak_rss_mb,
    resolve_bench_model,
    run_worker,
    write_result,
)

WORKERS = ("local", "dist1", "dist2")
# SmolLM2-135M's shape (hidden 576, 30 layers, 9 heads / 3 KV heads, MLP 1536), random weights.
SMOLLM2_135M_SHAPE = {
    "hidden_size": 576,
    "num_layers": 30,
    "num_heads": 9,
    "num_kv_heads": 3,
    "intermediate_size": 1536,
}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--model", default="smollm2-135m-shape", help="'smollm2-135m-shape' (random init), 'tiny', or a dir"
    )
    p.add_argument(
        "--lora", action="store_true", help="LoRA (rank 16, all linear layers) instead of full fine-tune"
    )
    p.add_argument("--batch", type=int, default=8, help="sequences per step")
    p.add_argument("--prompt-tokens", type=int, default=32)
    p.add_argument("--response-tokens", type=int, default=32)
    p.add_argument("--micro-batch-size", type=int, default=8)
    p.add_argument("--steps", type=int, default=5, help="timed steps, after one warm-up step")
    p.add_argument("--only", choices=WORKERS, default=None, help="run one setting only")
    p.add_argument(
        "--profile-collectives",
        action="store_true",
        help="distributed settings: measure the ranks' time in collectives (backend.distributed.profile_collectives)",
    )
    p.add_argument("--quick", action="store_true", help="plumbing check: tiny model, 4 sequences, 2 steps")
    p.add_argument("--worker", choices=WORKERS, help=argparse.SUPPRESS)
    p.add_argument("--result-file", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.quick:
        args.model, args.batch, args.prompt_tokens, args.response_tokens, args.steps = "tiny", 4, 8, 8, 2
    return args


def model_dir(spec: str) -> str:
    if spec != "smollm2-135m-shape":
        return resolve_bench_model(spec)
    from rllm.models import make_tiny_llama

    out = Path(tempfile.gettempdir()) / "rllm-bench-smollm2-135m-shape"
    if not (out / "config.json").is_file():
        make_tiny_llama(out, seed=0, **SMOLLM2_135M_SHAPE)
    return str(out)


# ---------------------------------------------------------------------------------------------- workers


def make_batch(args: argparse.Namespace) -> Any:
    import torch

    from rllm.types import TrainBatch, TrainSequence

    gen = torch.Generator().manual_seed(0)
    n = args.prompt_tokens + args.response_tokens
    mask = [0] * args.prompt_tokens + [1] * args.response_tokens
    return TrainBatch(
        sequences=[
            TrainSequence(
                input_ids=torch.randint(3, 49152, (n,), generator=gen).tolist(),
                loss_mask=mask,
                rollout_logprobs=[-10.8 * m for m in mask],
                advantages=[(1.0 if i % 2 == 0 else -1.0) * m for m in mask],
            )
            for i in range(args.batch)
        ]
    )


def run_setting(args: argparse.Namespace) -> dict[str, Any]:
    from rllm.algorithms.losses import LossConfig
    from rllm.trainer.backends import build_backend
    from rllm.trainer.config import TrainConfig
    from rllm.utils.config import load_config

    path = model_dir(args.model)
    cores = os.cpu_count() or 1
    overrides = [
        f"model.path={path}",
        "backend.device=cpu",
        "backend.autocast=none",
        f"lora.enabled={str(args.lora).lower()}",
        "lora.rank=16",
        "lora.alpha=32",
        f"backend.micro_batch_size={args.micro_batch_size}",
        "trainer.steps=100",
    ]
    if args.worker != "local":
        world = 1 if args.worker == "dist1" else 2
        overrides += [
            "backend.name=distributed",
            f"backend.distributed.world_size={world}",
            f"backend.distributed.cpus_per_rank={max(1, cores // world)}",
            f"backend.distributed.profile_collectives={str(args.profile_collectives).lower()}",
        ]
    cfg = load_config(TrainConfig, None, overrides)
    if args.worker != "local":
        import ray

        ray.init(num_cpus=cores, include_dashboard=False, logging_level="WARNING")
    started = time.perf_counter()
    backend = build_backend(cfg, path, pad_id=2)
    startup_s = time.perf_counter() - started
    batch, loss = make_batch(args), LossConfig()
    times: list[float] = []
    collectives: list[dict[str, float]] = []
    try:
        for step in range(args.steps + 1):
            t0 = time.perf_counter()
            backend.forward_backward(batch, loss)
            backend.optim_step()
            if step:  # the first step warms allocators and (for the ranks) FSDP2's lazy init
                times.append(time.perf_counter() - t0)
            measured = backend.step_metrics()  # outside the timed step; {} for the local backend
            if step and measured:
                collectives.append(measured)
    finally:
        backend.close()
    import torch

    return {
        "step_s": times,
        "collectives": collectives,
        "startup_s": startup_s,
        "peak_rss_mb": peak_rss_mb(),
        "threads": torch.get_num_threads(),
    }


# ---------------------------------------------------------------------------------------------- parent


def main() -> None:
    args = parse_args()
    if args.worker:
        write_result(args.result_file, run_setting(args))
        return
    model_dir(args.model)  # build once, before the workers race for it
    names = [
        "model",
        "lora",
        "batch",
        "prompt_tokens",
        "response_tokens",
        "micro_batch_size",
        "steps",
        "profile_collectives",
    ]
    results = {}
    for worker in [args.only] if args.only else WORKERS:
        results[worker] = run_worker(__file__, worker, forward_args(args, names), timeout_s=1800)
    print("\n" + header_line())
    print(machine_line())
    mode = "LoRA r=16" if args.lora else "full fine-tune"
    print(
        f"\nmodel {args.model} ({mode}, fp32), batch {args.batch} x ({args.prompt_tokens} prompt + "
        f"{args.response_tokens} response) tokens, micro-batch {args.micro_batch_size}, {args.steps} timed steps\n"
    )
    local = statistics.median(results["local"]["step_s"]) if "local" in results else None
    rows = []
    labels = {
        "local": "local backend",
        "dist1": "distributed, world size 1",
        "dist2": "distributed, world size 2",
    }
    for name, r in results.items():
        med, low = statistics.median(r["step_s"]), min(r["step_s"])
        vs = f"{100 * (med / local - 1):+.1f} %" if local and name != "local" else ""
        rows.append(
            [labels[name], f"{med:.3f}", f"{low:.3f}", vs, f"{r['startup_s']:.1f}", f"{r['peak_rss_mb']:.0f}"]
        )
    print(
        markdown_table(
            ["setting", "step s (median)", "step s (min)", "vs local", "start-up s", "driver peak RSS MB"],
            rows,
        )
    )
    measured = {name: r["collectives"] for name, r in results.items() if r.get("collectives")}
    if measured:
        print(
            "\nthe ranks' time in collectives per step (median over the timed steps; per rank, mean over ranks)\n"
        )
        print(markdown_table(COLLECTIVE_COLUMNS, [collective_row(labels[n], s) for n, s in measured.items()]))


COLLECTIVE_COLUMNS = [
    "setting",
    "in flight s",
    "exposed s",
    "rank working s",
    "exposed / working",
    "collectives",
    "reading events s",
]


def collective_row(label: str, steps: list[dict[str, float]]) -> list[str]:
    def med(key: str) -> float:
        return statistics.median(s[key] for s in steps)

    return [
        label,
        f"{med('profile/collective_s'):.3f}",
        f"{med('profile/collective_exposed_s'):.3f}",
        f"{med('profile/rank_busy_s'):.3f}",
        f"{100 * med('profile/collective_frac'):.1f} %",
        f"{med('profile/collectives'):.0f}",
        f"{med('profile/collective_overhead_s'):.3f}",
    ]


if __name__ == "__main__":
    main()
