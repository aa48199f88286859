"""``rllm gateway``: serve a model behind the OpenAI-compatible, trace-recording gateway."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any


def add_gateway_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "gateway",
        help="serve a model behind the OpenAI-compatible gateway that records token-faithful traces",
        description="Serve MODEL at http://HOST:PORT/v1 and per session at /sessions/{id}/v1; every call is "
        "stored with its prompt/completion token ids and logprobs (GET /sessions/{id}/traces). With no "
        "--upstream the model runs in the local engine; with --upstream URL the gateway forwards to vLLM, "
        "SGLang or any OpenAI-compatible server (several URLs: session-sticky routing with fail-over). "
        "--workers N runs N gateway processes on ports PORT..PORT+N-1 over one trace store; a client sends "
        "each session to one of them by rllm.gateway.pool.route(urls, session_id), or a load balancer in "
        "front hashes on the session id in the /sessions/{id} path.",
    )
    p.add_argument(
        "--model",
        required=True,
        help="built-in name (smollm2-135m), a model directory, or the name "
        "to serve an upstream's model under",
    )
    p.add_argument("--host", default="127.0.0.1", help="interface to listen on (default: 127.0.0.1)")
    p.add_argument(
        "--port",
        type=int,
        default=8000,
        help="port (default: 8000); with --workers N, the first of N consecutive ports",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="gateway worker processes sharing the --store file (default: 1); N > 1 needs --upstream "
        "(one process serves ~1,000 calls/s on one core)",
    )
    p.add_argument(
        "--log-dir",
        metavar="DIR",
        help="with --workers N: each worker's log goes to DIR/gateway-worker-I.log (default: this terminal)",
    )
    p.add_argument(
        "--upstream",
        action="append",
        default=[],
        metavar="URL",
        help="an upstream server's base URL (repeat for several workers)",
    )
    p.add_argument(
        "--upstream-kind",
        choices=["auto", "vllm", "sglang", "openai"],
        default="auto",
        help="how to ask the upstream for token ids (default: detect)",
    )
    p.add_argument("--upstream-model", help="the model name the upstream serves (default: its first model)")
    p.add_argument(
        "--upstream-api-key",
        default=os.environ.get("RLLM_UPSTREAM_API_KEY"),
        help="key sent to the upstream (default: $RLLM_UPSTREAM_API_KEY)",
    )
    p.add_argument(
        "--upstream-timeout-s",
        type=float,
        default=600.0,
        metavar="S",
        help="most seconds a call waits for an upstream's answer before it is retried on another worker "
        "(a hung server; default: 600)",
    )
    p.add_argument(
        "--store", default="gateway_traces.db", help="SQLite trace store (default: ./gateway_traces.db)"
    )
    p.add_argument(
        "--fsync",
        action="store_true",
        help="fsync every trace before replying: survives power loss, not only a killed gateway "
        "(~0.1-2 ms per commit; calls waiting together share one commit: group commit)",
    )
    p.add_argument(
        "--api-key",
        default=os.environ.get("RLLM_GATEWAY_API_KEY"),
        help="require 'Authorization: Bearer KEY' (default: $RLLM_GATEWAY_API_KEY, else none)",
    )
    p.add_argument(
        "--max-body-mb", type=float, default=16.0, help="largest request body accepted (default: 16)"
    )
    p.add_argument(
        "--tool-format", default="hermes", help="tool-call text format of the local model (hermes)"
    )
    p.add_argument("--device", default="auto", help="local engine device (auto, cpu, cuda)")
    p.add_argument("--dtype", default="auto", help="local engine dtype (auto, bfloat16, float32)")
    p.set_defaults(func=run_gateway)
    return p


def run_gateway(args: argparse.Namespace) -> int:
    # Imported here: the server pulls in uvicorn and Starlette, which `rllm --help` should not wait for.
    from rllm.gateway.server import serve
    from rllm.gateway.upstreams import UpstreamError

    if not 0 < args.port < 65536:
        print(f"rllm gateway: error: --port must be 1-65535, not {args.port}", file=sys.stderr)
        return 2
    if args.workers < 1:
        print(f"rllm gateway: error: --workers must be >= 1, not {args.workers}", file=sys.stderr)
        return 2
    if not 0 < args.upstream_timeout_s < float("inf"):
        print(
            f"rllm gateway: error: --upstream-timeout-s must be a positive number of seconds, "
            f"not {args.upstream_timeout_s}",
            file=sys.stderr,
        )
        return 2
    if args.workers > 1:
        return _run_workers(args)
    try:
        serve(
            model=args.model,
            host=args.host,
            port=args.port,
            store_path=args.store,
            upstreams=args.upstream,
            upstream_kind=args.upstream_kind,
            upstream_model=args.upstream_model,
            api_key=args.api_key,
            upstream_api_key=args.upstream_api_key,
            upstream_timeout_s=args.upstream_timeout_s,
            max_body_bytes=int(args.max_body_mb * 1024 * 1024),
            tool_format=args.tool_format,
            device=args.device,
            dtype=args.dtype,
            fsync=args.fsync,
        )
    except (UpstreamError, ValueError, FileNotFoundError) as exc:
        print(f"rllm gateway: error: {exc}", file=sys.stderr)
        return 2
    return 0


def _run_workers(args: argparse.Namespace) -> int:
    """``--workers N``: start the worker processes, print their URLs, restart one that dies (after it has
    run a while), stop them all on Ctrl-C / SIGTERM."""
    import signal
    import time

    # the gateway's processes: uvicorn and Starlette, not at `rllm --help`
    from rllm.gateway.pool import GatewayProcesses, GatewayWorkerDied
    from rllm.gateway.upstreams import UpstreamError

    stopping = False

    def on_signal(signum: int, frame: Any) -> None:
        nonlocal stopping
        stopping = True

    try:
        pool = GatewayProcesses(
            args.workers,
            model=args.model,
            store_path=args.store,
            upstreams=args.upstream,
            upstream_kind=args.upstream_kind,
            upstream_model=args.upstream_model,
            upstream_api_key=args.upstream_api_key,
            upstream_timeout_s=args.upstream_timeout_s,
            api_key=args.api_key,
            max_body_bytes=int(args.max_body_mb * 1024 * 1024),
            fsync=args.fsync,
            host=args.host,
            port=args.port,
            log_dir=args.log_dir,
        )
        pool.start()
    except (UpstreamError, ValueError, FileNotFoundError, OSError, GatewayWorkerDied) as exc:
        print(f"rllm gateway: error: {exc}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        print(f"{args.workers} gateway workers for {args.model}, traces in {args.store}:", flush=True)
        for url in pool.urls:
            print(f"  {url}/v1", flush=True)
        print(
            "send each session to the worker rllm.gateway.pool.route(urls, session_id) names (its calls stay "
            "on one worker), or hash on the session id of /sessions/{id}/... in a load balancer",
            flush=True,
        )
        while not stopping:
            time.sleep(0.5)
            try:
                for url in pool.restart_dead():
                    print(f"rllm gateway: worker {url} had exited; restarted it", file=sys.stderr, flush=True)
            except GatewayWorkerDied as exc:
                print(f"rllm gateway: error: {exc}", file=sys.stderr)
                return 1
        return 0
    finally:
        pool.stop()
