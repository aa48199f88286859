"""The programs the code reward runs in the sandbox, and the value codec they share with it.

Standard library only: this file is copied into the sandbox as ``main.py`` and run as

    python -I -S main.py serve solution.py ENTRY_POINT REQUEST_FD REPLY_FD
    python -I -S main.py check test.py ENTRY_POINT REQUEST_FD REPLY_FD

``serve`` loads the model's program (``solution.py``) and answers calls to its functions: one JSON request
per line in (``{"call": name, "args": ..., "kwargs": ...}``), one JSON reply per line out. ``check`` runs a
test's code (``test.py``) in a namespace whose functions are proxies for the program's, in another
sandbox, and prints one verdict line. Only plain data crosses between the two: values are encoded by
*type*, exactly (a subclass of ``int`` or an object with its own ``__eq__`` cannot be sent), so nothing the
program does in its own process (patching builtins, ``sys.exit``, printing, ``os._exit``) can reach the
code that decides whether a test passed.

rllm.rewards.code imports ``encode``/``decode`` from here to send call tests' arguments and read results.
"""

from __future__ import annotations

import builtins
import json
import os
import sys
import traceback
import types
from typing import Any

MAX_LINE_BYTES = 16 * 1024 * 1024
_BIG_INT_BITS = 8192  # larger ints travel as hex: int <-> decimal str is capped at 4300 digits (3.11+)


class EncodeError(TypeError):
    """A value that is not plain data (or nested too deeply) cannot cross the boundary."""


def encode(value: Any, depth: int = 0) -> Any:
    """``value`` as JSON data: None, bool, int, float, str, and list as themselves; every other plain type
    as a one-key object naming it (``{"tuple": [...]}``, ``{"dict": [[k, v], ...]}``). Exact types only."""
    if depth > 200:
        raise EncodeError("value nested more than 200 deep")
    kind = type(value)
    if value is None or kind in (bool, str, float):
        return value
    if kind is int:
        return {"int": format(value, "x")} if value.bit_length() > _BIG_INT_BITS else value
    if kind is list:
        return [encode(item, depth + 1) for item in value]
    if kind in (tuple, set, frozenset):
        return {kind.__name__: [encode(item, depth + 1) for item in value]}
    if kind is dict:
        return {"dict": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    if kind is bytes:
        return {"bytes": value.hex()}
    if kind is complex:
        return {"complex": [value.real, value.imag]}
    raise EncodeError(
        f"a {kind.__name__} is not plain data (None, bool, int, float, complex, str, bytes, "
        "list, tuple, set, frozenset, dict)"
    )


def decode(data: Any) -> Any:
    """The inverse of ``encode``; raises ``ValueError`` on anything ``encode`` cannot have written."""
    kind = type(data)
    if data is None or kind in (bool, int, float, str):
        return data
    if kind is list:
        return [decode(item) for item in data]
    if kind is dict and len(data) == 1:
        ((tag, body),) = data.items()
        if tag == "int" and type(body) is str:
            return int(body, 16)
        if tag == "bytes" and type(body) is str:
            return bytes.fromhex(body)
        if tag == "complex" and type(body) is list and len(body) == 2:
            return complex(float(body[0]), float(body[1]))
        if type(body) is list:
            if tag == "tuple":
                return tuple(decode(item) for item in body)
            if tag == "set":
                return {decode(item) for item in body}
            if tag == "frozenset":
                return frozenset(decode(item) for item in body)
            if tag == "dict" and all(type(pair) is list and len(pair) == 2 for pair in body):
                return {decode(k): decode(v) for k, v in body}
    raise ValueError("malformed value")


def dump_line(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def _private_streams(read_fd: int, write_fd: int) -> tuple[Any, Any]:
    """The protocol's two channels on fresh descriptors; stdin becomes /dev/null and stdout goes to stderr,
    so what the code prints or reads cannot mix with the protocol."""
    reader = os.fdopen(os.dup(read_fd), "rb")
    writer = os.fdopen(os.dup(write_fd), "wb")
    for fd in {read_fd, write_fd} - {0, 1, 2}:
        os.close(fd)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    return reader, writer


def _error_kind(error: BaseException) -> str:
    return "memory" if isinstance(error, MemoryError) else "runtime_error"


# --- serve: the model's side ------------------------------------------------------------------------


def serve(solution_path: str, entry_point: str, request_fd: int, reply_fd: int) -> None:
    requests, replies = _private_streams(request_fd, reply_fd)

    def send(message: dict[str, Any]) -> None:
        replies.write(dump_line(message))
        replies.flush()

    with open(solution_path, encoding="utf-8") as f:
        source = f.read()
    namespace: dict[str, Any] = {"__name__": "solution", "__builtins__": builtins}
    try:
        code = compile(source, "solution.py", "exec")
    except (SyntaxError, ValueError) as e:
        send({"load_error": "compile_error", "message": "".join(traceback.format_exception_only(type(e), e))})
        return
    try:
        exec(code, namespace)  # noqa: S102 - running the program is the point (we are in the sandbox)
    except BaseException as e:  # noqa: BLE001 - SystemExit too: the program ended before it could be tested
        traceback.print_exc()
        send({"load_error": _error_kind(e), "message": "".join(traceback.format_exception_only(type(e), e))})
        return
    kinds = (types.FunctionType, types.BuiltinFunctionType)
    functions = [
        name for name, value in namespace.items() if isinstance(value, kinds) and not name.startswith("__")
    ]
    send({"functions": functions})
    for line in requests:
        request = json.loads(line)
        try:
            function = _resolve(namespace, request["call"])
            value = function(*decode(request["args"]), **decode(request["kwargs"]))
            reply = {"value": encode(value)}
        except Exception as e:  # noqa: BLE001 - any error of the program's is an answer to the test
            traceback.print_exc()
            reply = {"raise": type(e).__name__, "message": str(e)[:2000]}
        send(reply)


def _resolve(namespace: dict[str, Any], name: str) -> Any:
    """The program's function ``name``, or the method of that name on a ``Solution()`` (LeetCode style)."""
    value = namespace.get(name)
    if callable(value) and not isinstance(value, type):
        return value
    solution = namespace.get("Solution")
    if isinstance(solution, type) and callable(getattr(solution, name, None)):
        return getattr(solution(), name)
    raise NameError(f"the program defines no function {name!r}")


# --- check: the test's side -------------------------------------------------------------------------


class CandidateGone(BaseException):
    """The program's process stopped answering (crashed, exited, or sent garbage). A BaseException so that
    a test's ``except Exception`` cannot swallow it; the verdict fails in any case once it happened."""


class _Channel:
    def __init__(self, requests: Any, replies: Any) -> None:
        self._requests, self._replies = requests, replies
        self.broken: str | None = None

    def receive(self) -> dict[str, Any]:
        line = self._replies.readline(MAX_LINE_BYTES + 1)
        try:
            if not line.endswith(b"\n"):
                raise ValueError("reply too long" if line else "the program's process ended")
            message = json.loads(line)
            if type(message) is not dict:
                raise ValueError("malformed reply")
            return message
        except (ValueError, RecursionError) as e:
            self.broken = str(e)
            raise CandidateGone(self.broken) from None

    def call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if self.broken:
            raise CandidateGone(self.broken)
        try:
            request = {"call": name, "args": encode(list(args)), "kwargs": encode(kwargs)}
            self._requests.write(dump_line(request))
            self._requests.flush()
        except BrokenPipeError:
            self.broken = "the program's process ended"
            raise CandidateGone(self.broken) from None
        reply = self.receive()
        if "value" in reply:
            try:
                return decode(reply["value"])
            except (ValueError, RecursionError):
                self.broken = "malformed value"
                raise CandidateGone(self.broken) from None
        error = getattr(builtins, str(reply.get("raise")), None)
        if not (isinstance(error, type) and issubclass(error, Exception)):
            error = RuntimeError
        raise error(f"{reply.get('raise')} in {name}: {reply.get('message', '')}")


def _proxy(channel: _Channel, name: str) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        return channel.call(name, args, kwargs)

    call.__name__ = call.__qualname__ = name
    return call


def _test_traceback(error: BaseException) -> str:
    """The traceback of ``error`` through the test's own lines only (not this harness's)."""
    frames = [frame for frame in traceback.extract_tb(error.__traceback__) if frame.filename == "test.py"]
    return "".join(traceback.format_list(frames) + traceback.format_exception_only(type(error), error))


def check(test_path: str, entry_point: str, request_fd: int, reply_fd: int) -> None:
    verdict_out = os.fdopen(os.dup(1), "w")  # the real stdout, before it is pointed at stderr
    replies, requests = _private_streams(reply_fd, request_fd)
    channel = _Channel(requests, replies)

    def verdict(passed: bool, error: str | None = None, message: str = "") -> None:
        verdict_out.write(json.dumps({"passed": passed, "error": error, "message": message[-2000:]}) + "\n")
        verdict_out.flush()

    with open(test_path, encoding="utf-8") as f:
        test_code = f.read()
    try:
        hello = channel.receive()
    except CandidateGone as e:
        verdict(False, "candidate_died", str(e))
        return
    if "load_error" in hello:
        verdict(False, str(hello["load_error"]), str(hello.get("message", "")))
        return
    names = [str(name) for name in hello.get("functions", [])]
    if entry_point and entry_point not in names:
        verdict(False, "runtime_error", f"the program defines no function {entry_point!r}")
        return
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    for name in names:
        # A program's function named like a builtin (``abs``, ``isinstance``) would otherwise replace the
        # builtin the test itself relies on.
        if name == entry_point or not hasattr(builtins, name):
            namespace[name] = _proxy(channel, name)
    try:
        exec(compile(test_code, "test.py", "exec"), namespace)  # noqa: S102 - the dataset's test, sandboxed
        outcome: tuple[bool, str | None, str] = (True, None, "")
    except AssertionError as e:
        outcome = (False, "wrong_answer", _test_traceback(e))
    except CandidateGone as e:
        outcome = (False, "candidate_died", str(e))
    except BaseException as e:  # noqa: BLE001 - whatever the test raised, it did not pass
        outcome = (False, _error_kind(e), _test_traceback(e))
    if channel.broken and outcome[0]:
        outcome = (False, "candidate_died", channel.broken)
    verdict(*outcome)


if __name__ == "__main__":
    mode, path, entry, request_fd, reply_fd = sys.argv[1:6]
    if hasattr(sys, "set_int_max_str_digits"):
        sys.set_int_max_str_digits(0)  # programs may legitimately print or compare huge ints
    (serve if mode == "serve" else check)(path, entry, int(request_fd), int(reply_fd))
