"""Time and peak RSS of training-shaped forward/backward passes under glibc's malloc, by mmap threshold
(``rllm.utils.allocator``; docs/profiling.md).

glibc serves a block above its mmap threshold with its own ``mmap`` (returned on ``free``, page-faulted in
afresh on every allocation) and a smaller one from the heap (reused, but kept resident when the heap
fragments). By default the threshold is *dynamic* (it rises to the size of each freed mmapped block, up to
32 MiB); setting it fixes it. Each setting runs in its own process (glibc reads ``MALLOC_MMAP_THRESHOLD_``
at start-up; the ``dynamic`` row leaves it unset and calls nothing), one torch thread, on two workloads:

- ``short``: 16 rows x 81 tokens, eager attention (the default run's micro-batch);
- ``long``: 1 row x 700 tokens, SDPA, gradient checkpointing (an agent example's multi-turn row).

Per setting it prints the median seconds of a forward/backward (after the first), the process's peak RSS
and its minor page faults (each a page the kernel zeroed and mapped).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_allocator.py            # smollm2-135m, 4 passes each
    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_allocator.py --quick    # tiny model, 2 settings, 2 passes
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

from _common import ROOT, header_line, machine_line, markdown_table, resolve_bench_model

SETTINGS = {  # row label -> MALLOC_MMAP_THRESHOLD_ (None: glibc's dynamic default)
    "dynamic (glibc default)": None,
    "128 KiB": 128 << 10,
    "1 MiB": 1 << 20,
    "4 MiB (rllm's)": 4 << 20,
    "32 MiB": 32 << 20,
}
WORKLOADS = {"short": (16, 81, "eager", False), "long": (1, 700, "sdpa", True)}


def worker(model_path: str, workload: str, passes: int) -> dict[str, float]:
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(1)
    torch.manual_seed(0)
    rows, tokens, attn, checkpointing = WORKLOADS[workload]
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32, attn_implementation=attn)
    model.config.use_cache = False
    model.train()
    if checkpointing:
        model.gradient_checkpointing_enable()
        model.enable_input_require_grads()
    for name, p in model.named_parameters():  # a LoRA-sized trainable set: one layer and the norms
        p.requires_grad_("layers.1." in name or "norm" in name)
    ids = torch.randint(0, model.config.vocab_size, (rows, tokens))
    before = resource.getrusage(resource.RUSAGE_SELF)
    seconds = []
    for _ in range(passes):
        start = time.perf_counter()
        logprobs = model(ids).logits.float().log_softmax(-1)
        logprobs[:, :, 5].sum().backward()
        del logprobs
        seconds.append(time.perf_counter() - start)
    after = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "seconds": statistics.median(seconds[1:] or seconds),
        "peak_rss_gb": after.ru_maxrss * 1024 / 1e9,
        "page_faults": after.ru_minflt - before.ru_minflt,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m", help="'smollm2-135m', 'tiny', or a model directory")
    p.add_argument(
        "--passes", type=int, default=4, help="forward/backward passes per setting (the first is not timed)"
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="plumbing check: tiny model, glibc's default and rllm's, 2 passes",
    )
    p.add_argument("--worker", nargs=2, metavar=("MODEL_DIR", "WORKLOAD"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker[0], args.worker[1], args.passes)))
        return
    settings = SETTINGS
    if args.quick:
        args.model, args.passes = "tiny", 2
        settings = {label: SETTINGS[label] for label in ("dynamic (glibc default)", "4 MiB (rllm's)")}
    model_path = resolve_bench_model(args.model)
    print(header_line())
    print(machine_line())
    rows = []
    for workload in WORKLOADS:
        for label, threshold in settings.items():
            env = {k: v for k, v in os.environ.items() if k != "MALLOC_MMAP_THRESHOLD_"}
            if threshold is not None:
                env["MALLOC_MMAP_THRESHOLD_"] = str(threshold)
            out = subprocess.run(
                [sys.executable, __file__, "--worker", model_path, workload, "--passes", str(args.passes)],
                env={**env, "PYTHONPATH": str(ROOT)},
                capture_output=True,
                text=True,
                check=True,
            )
            r = json.loads(out.stdout.strip().splitlines()[-1])
            rows.append(
                [workload, label, f"{r['seconds']:.2f}", f"{r['peak_rss_gb']:.2f}", f"{r['page_faults']:,}"]
            )
            print(f"  {workload} / {label}: {r['seconds']:.2f} s, {r['peak_rss_gb']:.2f} GB", flush=True)
    print()
    print(
        markdown_table(
            ["workload", "mmap threshold", "s per pass (median)", "peak RSS GB", "page faults"], rows
        )
    )


if __name__ == "__main__":
    main()
