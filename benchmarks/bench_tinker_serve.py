"""What the Tinker API costs over calling rllm directly: one training step (``forward_backward`` with
``cross_entropy`` on B datums of T tokens, then ``optim_step``) through the real tinker SDK against
``rllm serve tinker`` (in this process, loopback HTTP), and the same step on a ``LocalBackend`` built with
the service's own settings, in one run, the two taking turns. Median of ``--repeats`` steps after one
warm-up each; also the time to save sampler weights and sample from them.

    python benchmarks/bench_tinker_serve.py                 # smollm2-135m, B=8, T=64, float32
    python benchmarks/bench_tinker_serve.py --quick         # plumbing check: tiny model, 2 steps
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

from _common import header_line, machine_line, markdown_table, resolve_bench_model, set_threads


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m", help="built-in name, model directory, or 'tiny'")
    p.add_argument("--batch", type=int, default=8, help="datums per forward_backward (B)")
    p.add_argument("--tokens", type=int, default=64, help="tokens per datum (T)")
    p.add_argument("--rank", type=int, default=16, help="LoRA rank")
    p.add_argument("--repeats", type=int, default=5, help="timed steps per path")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--quick", action="store_true", help="tiny model, B=2, T=16, 2 repeats")
    args = p.parse_args()
    if args.quick:
        args.model, args.batch, args.tokens, args.repeats = "tiny", 2, 16, 2
    return args


def timed(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def interleaved(fns: list[Callable[[], object]], repeats: int) -> list[float]:
    """Median seconds of each of ``fns``, run in turn (A B A B ...) after one warm-up each, so a load
    that comes and goes on a shared machine falls on both alike."""
    for fn in fns:
        fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            times[i].append(time.perf_counter() - t0)
    return [statistics.median(t) for t in times]


def main() -> None:
    args = parse_args()
    threads = set_threads(args.threads)
    os.environ.setdefault("TINKER_TELEMETRY", "0")
    import tempfile

    import tinker
    from tinker import types

    from rllm.algorithms.losses import LossConfig
    from rllm.serve.tinker import ServeConfig, ServerThread, build_service
    from rllm.trainer.backends.local import LocalBackend
    from rllm.types import TrainBatch, TrainSequence

    model = resolve_bench_model(args.model)
    with tempfile.TemporaryDirectory() as state:
        service = build_service(ServeConfig(model=model, device="cpu", dtype="float32", state_dir=state))
        vocab = service.settings.vocab_size
        rows = [[(7 + 131 * b + 17 * t) % vocab for t in range(args.tokens + 1)] for b in range(args.batch)]
        data = [
            types.Datum(
                model_input=types.ModelInput.from_ints(r[:-1]),
                loss_fn_inputs={"target_tokens": r[1:], "weights": [1.0] * args.tokens},
            )
            for r in rows
        ]
        with ServerThread(service) as server:
            client = tinker.ServiceClient(base_url=server.base_url, api_key="tml-bench")
            tc = client.create_lora_training_client(base_model=model, rank=args.rank, seed=0).result()
            adam = types.AdamParams(learning_rate=1e-4)

            def sdk_step() -> None:
                fb = tc.forward_backward(data, "cross_entropy")
                tc.optim_step(adam).result()
                fb.result()

            backend: LocalBackend = service.models[tc.model_id].model.backend  # type: ignore[assignment]
            direct_backend = LocalBackend(backend.cfg, backend.model_path, pad_id=backend.pad_id)
            batch = TrainBatch(
                sequences=[
                    TrainSequence(
                        input_ids=r,
                        loss_mask=[0] + [1] * args.tokens,
                        rollout_logprobs=[0.0] * len(r),
                        advantages=[0.0] + [1.0] * args.tokens,
                    )
                    for r in rows
                ],
                loss_norm_tokens=1.0,
                loss_norm_sequences=1.0,
            )
            loss = LossConfig(name="cross_entropy")

            def direct_step() -> None:
                direct_backend.forward_backward(batch, loss, logprobs_out=[])
                direct_backend.optim_step()

            served, direct = interleaved([sdk_step, direct_step], args.repeats)
            prompt, params = types.ModelInput.from_ints(rows[0][:8]), types.SamplingParams(max_tokens=16)
            t0 = time.perf_counter()
            sampler = tc.save_weights_and_get_sampling_client().result()
            save_s = time.perf_counter() - t0
            sample_s = timed(lambda: sampler.sample(prompt, 4, params).result(), args.repeats)
            client.close("success").result(timeout=30)
    print(header_line())
    print(machine_line() + f", torch threads {threads}")
    print(
        f"model {args.model}, LoRA rank {args.rank}, B={args.batch} datums x T={args.tokens} tokens, float32"
    )
    print(
        markdown_table(
            ["path", "median step (s)"],
            [
                ["tinker SDK -> rllm serve tinker (forward_backward + optim_step)", f"{served:.3f}"],
                ["LocalBackend directly (same settings)", f"{direct:.3f}"],
                ["overhead", f"{served - direct:+.3f} ({served / direct:.2f}x)"],
                ["save_weights_and_get_sampling_client", f"{save_s:.3f}"],
                ["sample 4 x 16 tokens", f"{sample_s:.3f}"],
            ],
        )
    )


if __name__ == "__main__":
    main()
