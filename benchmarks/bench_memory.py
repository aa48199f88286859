"""Peak memory of one training forward/backward against the trained tokens of a micro-batch, with the
logprobs computed in chunks of tokens (``backend.logprob_chunk_tokens``) and all at once (0), side by side.

Each micro-batch has ``rows`` rows of a ``--prompt``-token prompt and a ``--response``-token answer (trained), so the
trained tokens grow with the rows while attention stays the same per row. Per size and mode it prints:

- the most bytes torch held allocated at once during ``forward_backward`` (torch.profiler's memory events:
  exact, and free of the model's weights and the allocator's caching), and how much of it is the
  vocabulary projection: the unchunked peak holds about four ``[tokens x vocab]`` float32 tensors, the
  chunked one four ``[chunk x vocab]``, whatever the micro-batch;
- the seconds of one un-profiled forward/backward (the chunks recompute the LM head in the backward).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_memory.py            # smollm2-135m, 512..8192 tokens
    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_memory.py --quick    # tiny model, two sizes, < 1 min
"""

from __future__ import annotations

import argparse
import time

import torch
from _common import header_line, machine_line, markdown_table, resolve_bench_model, set_threads

from rllm.algorithms.losses import LossConfig
from rllm.trainer.backends.local import LocalBackend
from rllm.trainer.config import TrainConfig
from rllm.trainer.profiler import GB, allocation_peak_bytes
from rllm.types import TrainBatch, TrainSequence
from rllm.utils.config import load_config


def batch_of(rows: int, prompt: int, response: int, vocab: int, seed: int = 0) -> TrainBatch:
    """``rows`` rows of a ``prompt``-token prompt (each its own) and a ``response``-token trained answer."""
    gen = torch.Generator().manual_seed(seed)
    sequences = []
    for i in range(rows):
        ids = torch.randint(3, vocab, (prompt + response,), generator=gen).tolist()
        mask = [0] * prompt + [1] * response
        sequences.append(
            TrainSequence(
                input_ids=ids,
                loss_mask=mask,
                rollout_logprobs=[-10.0 * m for m in mask],
                advantages=[(1.0 if i % 2 else -1.0) * m for m in mask],
            )
        )
    return TrainBatch(sequences=sequences)


def measure(backend: LocalBackend, batch: TrainBatch, chunk: int) -> dict[str, float]:
    backend.cfg.backend.logprob_chunk_tokens = chunk
    loss = LossConfig()

    def step() -> None:
        backend.forward_backward(batch, loss)
        backend.optimizer.zero_grad(set_to_none=True)

    peak = allocation_peak_bytes(step)
    started = time.perf_counter()
    step()
    return {
        "alloc_gb": peak / GB,
        "seconds": time.perf_counter() - started,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="tiny model, two sizes: the CI plumbing check")
    parser.add_argument("--model", default=None, help="model (default smollm2-135m; --quick: tiny)")
    parser.add_argument("--prompt", type=int, default=32, help="prompt tokens per row (not trained)")
    parser.add_argument("--response", type=int, default=256, help="trained tokens per row")
    parser.add_argument("--attn", default="auto", help="backend.attn_implementation (auto: eager on CPU)")
    parser.add_argument(
        "--gradient-checkpointing",
        action="store_true",
        help="backend.gradient_checkpointing=true (and backend.share_prefix=false, which it needs)",
    )
    parser.add_argument("--rows", default=None, help="rows per micro-batch, comma-separated (default 2,8,32)")
    parser.add_argument(
        "--chunk", type=int, default=1024, help="backend.logprob_chunk_tokens of the chunked mode"
    )
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = parser.parse_args()
    rows_list = [int(r) for r in (args.rows or ("1,4" if args.quick else "2,8,32")).split(",")]
    response = 128 if args.quick and args.response == 256 else args.response
    chunk = 128 if args.quick and args.chunk == 1024 else args.chunk
    model = resolve_bench_model(args.model or ("tiny" if args.quick else "smollm2-135m"))
    threads = set_threads(args.threads)
    cfg = load_config(
        TrainConfig,
        None,
        [
            f"model.path={model}",
            "backend.device=cpu",
            f"backend.micro_batch_size={max(rows_list)}",
            f"backend.attn_implementation={args.attn}",
            *(
                ["backend.gradient_checkpointing=true", "backend.share_prefix=false"]
                if args.gradient_checkpointing
                else []
            ),
        ],
    )
    backend = LocalBackend(cfg, model, pad_id=2)
    vocab = int(backend.model.get_base_model().config.vocab_size)
    print(header_line())
    print(
        f"{machine_line()}, {threads} torch threads, model {model} (vocab {vocab}), rows of {args.prompt} prompt + "
        f"{response} trained tokens, attention {args.attn}, gradient checkpointing {args.gradient_checkpointing}, "
        f"chunk {chunk} tokens\n"
    )
    table = []
    for rows in rows_list:
        batch = batch_of(rows, args.prompt, response, vocab)
        chunked, whole = measure(backend, batch, chunk), measure(backend, batch, 0)
        tokens = rows * response
        table.append(
            [
                str(tokens),
                f"{whole['alloc_gb']:.3f}",
                f"{chunked['alloc_gb']:.3f}",
                f"{4 * tokens * vocab * 4 / GB:.3f}",
                f"{whole['seconds']:.2f}",
                f"{chunked['seconds']:.2f}",
            ]
        )
    print(
        markdown_table(
            [
                "trained tokens / micro-batch",
                "peak alloc GB, unchunked",
                f"peak alloc GB, chunk {chunk}",
                "4 x tokens x vocab x 4 B, GB",
                "fwd/bwd s, unchunked",
                f"fwd/bwd s, chunk {chunk}",
            ],
            table,
        )
    )


if __name__ == "__main__":
    main()
