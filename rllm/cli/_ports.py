"""What the commands that serve HTTP (``rllm ui``, ``rllm serve``) share before they start a server."""

from __future__ import annotations

import socket
import sys


def port_taken(command: str, host: str, port: int) -> bool:
    """Whether ``host:port`` cannot be listened on; if so, say so on stderr in one line (not uvicorn's
    traceback) naming the fix."""
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as exc:
        print(
            f"{command}: cannot listen on {host}:{port} ({exc.strerror}): pass another --port",
            file=sys.stderr,
        )
        return True
    return False
