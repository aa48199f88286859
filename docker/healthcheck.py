"""The containers' HEALTHCHECK: probe ``rllm gateway``'s ``/health`` when the container runs the gateway.

    python docker/healthcheck.py [--pid PID]      (default: PID 1, the container's entrypoint)

It reads the command line of PID (``/proc/PID/cmdline``). For ``rllm gateway ... [--port P] [--api-key K]``
it sends ``GET http://127.0.0.1:P/health`` (port 8000 when not given; with ``--workers N``, every port
P..P+N-1; the key from ``--api-key`` or ``$RLLM_GATEWAY_API_KEY``) and exits 0 when every answer is 200,
else 1, saying why on stdout (Docker keeps it in ``docker inspect``). Any other command (``rllm train``,
``rllm eval``) has no port to probe and counts as healthy: a Dockerfile's HEALTHCHECK applies to every
container of the image. Standard library only, so it runs in any image.
"""

from __future__ import annotations

import argparse
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

DEFAULT_PORT = 8000
TIMEOUT_S = 4.0


def read_cmdline(pid: int) -> list[str]:
    """The argv of process ``pid``, from ``/proc``."""
    raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _option(argv: list[str], name: str) -> str | None:
    """The value of ``--name V`` or ``--name=V`` in argv (the last one wins, as with argparse)."""
    value = None
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(name + "="):
            value = arg.split("=", 1)[1]
    return value


def gateway_ports(argv: list[str]) -> list[int] | None:
    """The ports an ``rllm gateway`` command line listens on, or None when argv is not the gateway."""
    if "gateway" not in argv:
        return None
    after = argv[argv.index("gateway") + 1 :]
    port = int(_option(after, "--port") or DEFAULT_PORT)
    workers = int(_option(after, "--workers") or 1)
    return list(range(port, port + workers))


def probe(port: int, api_key: str | None) -> str | None:
    """None when ``/health`` on ``port`` answers 200, else what went wrong."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}/health")
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            status = response.status
    except urllib.error.HTTPError as err:
        status = err.code
    except (urllib.error.URLError, OSError) as err:
        return f"port {port}: {getattr(err, 'reason', err)}"
    return None if status == 200 else f"port {port}: /health answered {status}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pid", type=int, default=1, help="the process to check (default: 1)")
    args = parser.parse_args(argv)
    try:
        command = read_cmdline(args.pid)
    except OSError as err:  # the process is gone (or /proc is not mounted)
        print(f"unhealthy: cannot read the command line of process {args.pid}: {err.strerror or err}")
        return 1
    ports = gateway_ports(command)
    if ports is None:
        print(f"healthy: not a gateway ({' '.join(command[:3])})")
        return 0
    after = command[command.index("gateway") + 1 :]
    api_key = _option(after, "--api-key") or os.environ.get("RLLM_GATEWAY_API_KEY")
    problems = [p for p in (probe(port, api_key) for port in ports) if p]
    if problems:
        print("unhealthy: " + "; ".join(problems))
        return 1
    print(f"healthy: gateway on port(s) {', '.join(map(str, ports))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
