"""``rllm ui``: browse the runs of a workspace in a web browser.

    rllm ui                              the store of runs/ (or $RLLM_STORE) at http://127.0.0.1:8265/
    rllm ui --store path/to/rllm.db --port 9000

Live metric charts of running trainings, the sampled episodes of each step down to each token's logprob
and advantage, eval results, config snapshots. The server only reads the store, so it can run beside a
training run (or after it) and be stopped at any time. Serving beyond loopback (``--host 0.0.0.0``) shows
configs and episodes to anyone who can reach the port: there is no login.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from rllm.cli._ports import port_taken

logger = logging.getLogger(__name__)

DEFAULT_PORT = 8265


def add_ui_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "ui",
        help="browse runs in a web UI: live metrics, episodes, tokens, evals",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port to listen on (default {DEFAULT_PORT})"
    )
    p.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)"
    )
    p.add_argument(
        "--store",
        type=Path,
        default=None,
        help="the run store to show (default: $RLLM_STORE, else runs/rllm.db)",
    )
    p.set_defaults(func=run_ui)
    return p


def run_ui(args: argparse.Namespace) -> int:
    # Imported here: the UI pulls in uvicorn, Starlette and the store (numpy), which `rllm --help` should
    # not wait for.
    import uvicorn

    from rllm.store import default_store_path
    from rllm.ui.app import create_app

    store = args.store or default_store_path()
    if port_taken("rllm ui", args.host, args.port):
        return 2
    if not store.exists():
        logger.info(
            "no run store at %s yet: the UI lists runs as soon as `rllm train` or `rllm eval` records one",
            store,
        )
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        logger.warning(
            "serving on %s: anyone who can reach this port sees the runs (there is no login)", args.host
        )
    logger.info("rllm ui: http://%s:%d/  (store %s; Ctrl-C stops it)", args.host, args.port, store)
    uvicorn.run(create_app(store), host=args.host, port=args.port, log_level="warning")
    return 0
