"""What an idle thread's OpenMP pool costs the thread that computes, and what freeing it buys
(``rllm.utils.openmp``; docs/profiling.md).

libgomp keeps a worker pool per thread that ever ran a parallel region, and throttles every pool's spinning
once the pools hold more threads than the machine has cores. An rllm process has two computing threads (the
trainer's and the local engine's decode thread), each idle while the other works. Two measurements, each
against the same code without the release, in one process:

- ``products``: one decode step's matrix products (``profile_decode_step.gemm_floor``: every linear weight
  of the model times ``[--batch, in]``) in the main thread, alone; while a second thread that ran torch ops
  waits with its pool; and after that thread freed its pool (``release_openmp_threads``). Rounds of the
  three alternate, and the median pass of each is reported.
- ``grpo step``: the benchmark GRPO step of ``bench_grpo_vs_trl.py`` (fp32, LoRA, every completion
  ``--tokens`` long), its steps alternating between rllm as it is and rllm with the release calls made
  no-ops (the engine's and the trainer's); the median step and its rollout and forward/backward.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_openmp.py           # smollm2-135m, 2 threads, 2 x 4 x 32
    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_openmp.py --quick   # tiny model: the CI plumbing check
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import tempfile
import threading
import time

import bench_grpo_vs_trl as grpo
import torch
from _common import header_line, machine_line, markdown_table, resolve_bench_model, set_threads
from profile_decode_step import gemm_floor

from rllm.utils.openmp import release_openmp_threads

RELEASE_SITES = ("rllm.inference.local", "rllm.trainer.agent_trainer")  # where rllm calls the release


def products(model: torch.nn.Module, batch: int, rounds: int, repeats: int) -> dict[str, float]:
    """Median ms of a pass over the step's products: alone, beside an idle thread holding its pool, and
    beside the same thread after it freed its pool."""
    wake, freed, done = threading.Event(), threading.Event(), threading.Event()

    def idle_thread() -> None:
        gemm_floor(model, batch, 1)  # its pool exists from here on
        wake.wait()
        release_openmp_threads()
        freed.set()
        done.wait()

    times: dict[str, list[float]] = {
        "alone": [],
        "idle thread with its pool": [],
        "idle thread, pool freed": [],
    }
    for _ in range(rounds):
        release_openmp_threads()  # the main thread's own pool is rebuilt by its next pass
        times["alone"].append(gemm_floor(model, batch, repeats)[0])
        wake.clear(), freed.clear(), done.clear()
        helper = threading.Thread(target=idle_thread)
        helper.start()
        time.sleep(0.2)  # it ran its pass and waits
        times["idle thread with its pool"].append(gemm_floor(model, batch, repeats)[0])
        wake.set(), freed.wait()
        times["idle thread, pool freed"].append(gemm_floor(model, batch, repeats)[0])
        done.set(), helper.join()
    return {k: statistics.median(v) * 1e3 for k, v in times.items()}


def grpo_steps(model: str, prompts: int, group: int, tokens: int, steps: int) -> dict[str, dict[str, float]]:
    """Median seconds of the GRPO step and its phases, steps alternating between the release on and off."""
    args = grpo.parse_args(
        ["--model", model, "--precision", "fp32", "--prompts", str(prompts), "--generations", str(group)]
        + ["--max-tokens", str(tokens), "--steps", str(steps)]
    )
    trainer = grpo.bench_trainer(args, tempfile.mkdtemp(prefix="rllm-bench-openmp-"))
    trainer._setup()
    trainer.train_sampling = trainer.train_sampling.model_copy(update={"ignore_eos": True})
    sites = [importlib.import_module(name) for name in RELEASE_SITES]

    def noop() -> bool:
        return False

    out: dict[str, list[dict[str, float]]] = {"released (rllm)": [], "not released": []}
    for step in range(1 + 2 * steps):  # step 0 warms up
        mode = "released (rllm)" if step % 2 else "not released"
        for site in sites:
            site.release_openmp_threads = release_openmp_threads if step % 2 else noop
        m = trainer.train_step(step)
        if step:
            out[mode].append(
                {
                    k: m[f"time/{k}_s"]
                    for k in ("step", "rollout", "forward_backward", "sync")
                    if f"time/{k}_s" in m
                }
            )
    for site in sites:
        site.release_openmp_threads = release_openmp_threads
    return {mode: {k: statistics.median(r[k] for r in rows) for k in rows[0]} for mode, rows in out.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="model (default smollm2-135m; --quick: tiny)")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads (the pools' size)")
    p.add_argument("--batch", type=int, default=8, help="rows of the products pass")
    p.add_argument("--rounds", type=int, default=3, help="rounds of the three product settings")
    p.add_argument("--repeats", type=int, default=10, help="passes per setting and round")
    p.add_argument("--prompts", type=int, default=2)
    p.add_argument("--group", type=int, default=4)
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--steps", type=int, default=4, help="timed GRPO steps per setting")
    p.add_argument("--quick", action="store_true", help="tiny model, few passes and steps")
    args = p.parse_args()
    if args.quick:
        args.model, args.rounds, args.repeats, args.tokens, args.steps = "tiny", 1, 2, 8, 1
    model_path = resolve_bench_model(args.model or "smollm2-135m")
    set_threads(args.threads)
    print(header_line())
    print(machine_line())
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    ms = products(model, args.batch, args.rounds, args.repeats)
    del model
    print(
        f"\nproducts of one decode step ({args.batch} rows, float32, {torch.get_num_threads()} threads), median ms a pass:"
    )
    alone = ms["alone"]
    print(
        markdown_table(
            ["main thread", "ms", "vs alone"], [[k, f"{v:.1f}", f"{v / alone:.2f}x"] for k, v in ms.items()]
        )
    )
    steps = grpo_steps(model_path, args.prompts, args.group, args.tokens, args.steps)
    print(
        f"\nGRPO step ({args.prompts} x {args.group} x {args.tokens}, fp32, LoRA), median s over {args.steps} "
        "steps each, alternating:"
    )
    keys = list(next(iter(steps.values())))
    print(
        markdown_table(
            ["release", *keys], [[mode, *(f"{row[k]:.2f}" for k in keys)] for mode, row in steps.items()]
        )
    )


if __name__ == "__main__":
    main()
