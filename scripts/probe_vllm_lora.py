"""Sampling throughput of one vLLM server with and without LoRA (docs/vllm_notes.md, "Two limits of the CPU
build"): concurrent /v1/completions calls of 32 tokens (temperature 1, ignore_eos) on the built-in model.

    .venv/bin/python scripts/probe_vllm_lora.py                                  # no LoRA
    .venv/bin/python scripts/probe_vllm_lora.py --adapter DIR --max-lora-rank 8  # with a PEFT adapter loaded

Extra arguments after ``--`` go to vLLM (e.g. ``-- --no-enable-chunked-prefill``). Needs scripts/setup_vllm.sh.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import httpx
from transformers import AutoTokenizer

from rllm.inference.vllm_server import VLLMServer, load_lora_adapter
from rllm.models import resolve_model


async def _batch(srv: VLLMServer, model: str, prompts: list[str], seed: int | None) -> None:
    async with httpx.AsyncClient(timeout=600) as client:
        t0 = time.perf_counter()
        replies = await asyncio.gather(
            *(
                client.post(
                    srv.base_url + "/completions",
                    json={
                        "model": model,
                        "prompt": p,
                        "max_tokens": 32,
                        "temperature": 1.0,
                        "ignore_eos": True,
                        **({"seed": seed} if seed is not None else {}),
                    },
                )
                for p in prompts
            )
        )
        dt = time.perf_counter() - t0
    tokens = sum(r.json()["usage"]["completion_tokens"] for r in replies)
    print(f"batch {len(prompts)}: {tokens} tokens in {dt:.1f} s = {tokens / dt:.0f} tok/s", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--adapter", help="a PEFT adapter directory to load and sample from (default: no LoRA)")
    ap.add_argument("--max-lora-rank", type=int, default=32)
    ap.add_argument("--batch-sizes", default="8,32,64")
    ap.add_argument("--seed", type=int, default=None, help="send this seed with every call")
    ap.add_argument("vllm_args", nargs="*")
    args = ap.parse_args()
    model = resolve_model("smollm2-135m")
    tok = AutoTokenizer.from_pretrained(model)
    sizes = [int(b) for b in args.batch_sizes.split(",")]
    prompts = [
        tok.apply_chat_template(
            [{"role": "user", "content": f"Which number is larger, {i} or {i * 7 % 100}?"}],
            add_generation_prompt=True,
            tokenize=False,
        )
        for i in range(max(sizes))
    ]
    srv = VLLMServer(
        model,
        enable_lora=args.adapter is not None,
        max_lora_rank=args.max_lora_rank,
        extra_args=args.vllm_args,
        kvcache_space_gib=1,
    )
    with srv:
        name = srv.served_model_name
        if args.adapter:
            load_lora_adapter(srv.url, "probe", args.adapter)
            name = "probe"
        for n in sizes:
            asyncio.run(_batch(srv, name, prompts[:n], args.seed))


if __name__ == "__main__":
    main()
