"""``rllm serve tinker``: the Tinker training and sampling API on this machine, for the tinker SDK.

    rllm serve tinker --model smollm2-135m --port 8000
    TINKER_BASE_URL=http://127.0.0.1:8000 TINKER_API_KEY=tml-local python my_tinker_script.py

Each ``create_lora_training_client`` gets its own LoRA adapter and optimizer on rllm's local training
backend; sampling clients sample the saved weights on rllm's local inference engine. Without
``--api-key`` any key is accepted (the SDK itself wants one starting with ``tml-``): do not serve beyond
loopback without one.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import sys
from typing import Any

from rllm.cli._ports import port_taken

logger = logging.getLogger(__name__)


def add_serve_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "serve",
        help="serve another project's API over rllm's trainer and engine (tinker)",
        description="Serve an API backed by rllm's local training backend and inference engine.",
    )
    kinds = p.add_subparsers(dest="api", metavar="{tinker}", required=True)
    t = kinds.add_parser(
        "tinker",
        help="the Tinker API (LoRA training + sampling) for the unmodified tinker SDK",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    t.add_argument(
        "--model", required=True, help="built-in name (smollm2-135m) or a Hugging Face model directory"
    )
    t.add_argument("--host", default="127.0.0.1", help="interface to listen on (default: 127.0.0.1)")
    t.add_argument("--port", type=int, default=8000, help="port (default: 8000)")
    t.add_argument(
        "--device", default="auto", help="auto (cuda if available), cpu, cuda or cuda:N (default: auto)"
    )
    t.add_argument(
        "--dtype",
        choices=["auto", "float32", "bfloat16"],
        default="auto",
        help="sampler weights and training autocast; float32 makes sampled and trained logprobs agree to "
        "float rounding (default: auto, bf16 where the hardware runs it)",
    )
    t.add_argument(
        "--max-samplers",
        type=int,
        default=4,
        metavar="K",
        help="saved sampler weights kept per trained model, each a copy of the model (default: 4)",
    )
    t.add_argument(
        "--api-key",
        default=os.environ.get("RLLM_TINKER_API_KEY"),
        help="require this key (the client's TINKER_API_KEY; default: $RLLM_TINKER_API_KEY, else any key)",
    )
    t.add_argument(
        "--state-dir",
        default="tinker_state",
        help="where save_state writes training checkpoints (default: ./tinker_state)",
    )
    t.add_argument(
        "--micro-batch-size", type=int, default=16, help="sequences per forward/backward pass (default: 16)"
    )
    t.add_argument(
        "--backend",
        choices=["local", "distributed"],
        default="local",
        help="the rllm training backend of each trained model: local (this process) or distributed (FSDP2 "
        "ranks placed by Ray; needs rllm[distributed]) (default: local)",
    )
    t.add_argument(
        "--world-size",
        type=int,
        default=2,
        help="ranks per trained model with --backend distributed (default: 2)",
    )
    t.set_defaults(func=run_serve_tinker)
    return p


def run_serve_tinker(args: argparse.Namespace) -> int:
    if args.max_samplers < 1:
        print("rllm serve tinker: --max-samplers must be at least 1", file=sys.stderr)
        return 2
    if args.backend == "distributed" and importlib.util.find_spec("ray") is None:
        print(
            "rllm serve tinker: --backend distributed places its ranks with Ray, which is not installed: "
            "pip install 'rllm[distributed]'",
            file=sys.stderr,
        )
        return 2
    if port_taken("rllm serve tinker", args.host, args.port):
        return 2
    try:  # the optional extra: a one-line error, not an ImportError traceback
        import tinker  # noqa: F401
    except ImportError:
        print("rllm serve tinker: the tinker SDK is missing: pip install 'rllm[tinker]'", file=sys.stderr)
        return 2
    # Imported here: the service pulls in torch, transformers, uvicorn and the tinker SDK, which
    # `rllm --help` should not wait for.
    from rllm.models import ModelNotFoundError
    from rllm.serve.tinker.server import ServeConfig, serve

    if args.host not in ("127.0.0.1", "localhost", "::1") and not args.api_key:
        logger.warning(
            "serving on %s with no --api-key: anyone who can reach this port can train and sample", args.host
        )
    cfg = ServeConfig(
        model=args.model,
        host=args.host,
        port=args.port,
        device=args.device,
        dtype=args.dtype,
        max_samplers=args.max_samplers,
        api_key=args.api_key,
        state_dir=args.state_dir,
        micro_batch_size=args.micro_batch_size,
        backend=args.backend,
        world_size=args.world_size,
    )
    try:
        serve(cfg)
    except (ModelNotFoundError, ValueError) as exc:
        print(f"rllm serve tinker: {exc}", file=sys.stderr)
        return 2
    return 0
