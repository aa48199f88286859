"""The code reward: run the program in a model's response against a task's tests, each in ``rllm.sandbox``.

    from rllm.rewards.code import code_reward, make_code_reward
    result = code_reward(task, response)    # reward: the fraction of tests passed
    strict = make_code_reward(timeout_s=10, memory_mb=1024, max_parallel=4)
    numeric = make_code_reward(packages=("numpy",))   # the programs may import numpy too

``task["ground_truth"]`` (a dict, or the same dict as a JSON string) is
``{"tests": [TEST, ...], "entry_point": "fn_name" or None}``, each TEST one of:

- ``{"type": "stdio", "input": "...", "output": "..."}``: the program runs with ``input`` on stdin and passes
  when it exits 0 and its stdout equals ``output`` once trailing whitespace is stripped from each line and
  from the end;
- ``{"type": "call", "args": [...], "kwargs": {...}, "expected": ...}``: ``entry_point(*args, **kwargs)``
  returns ``expected`` (JSON values: a tuple counts as a list; floats within 1e-6 relative, 1e-9 absolute);
- ``{"type": "assert", "code": "..."}``: the code runs after the program, in its namespace, and passes when
  it raises nothing (HumanEval: the test code + ``"\\ncheck(ENTRY)"``; MBPP: one test per assert line).

Why the program cannot fake a pass: whatever decides a test never runs in the program's process.

- stdio and call tests are judged here, on the output or on the returned value, which comes back as plain
  data decoded by type (no ``__eq__`` of the program's survives); the expected answer never enters the
  sandbox;
- an assert test's code runs in a second sandbox, where the program's functions are proxies that call into
  the program's sandbox over a pipe and get plain data back; its verdict comes back on that second
  sandbox's stdout, out of the program's reach (another process; under bwrap another uid and namespaces).

So printing a fake verdict, ``sys.exit(0)``/``os._exit(0)`` before the tests, patching builtins or
``__eq__``, or writing a results file changes nothing. The price, for assert tests: only plain data reaches
the program's functions (no objects, callbacks or instances of the program's classes), arguments are copies
(in-place mutation is not seen), and the test sees the program's functions, not its other globals.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import math
import os
import re
import reprlib
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rllm import sandbox
from rllm.rewards import _code_harness as harness
from rllm.rewards.text import strip_thinking
from rllm.rewards.types import RewardFn
from rllm.sandbox import SandboxResult, arun_python
from rllm.types import Outcome

_HARNESS = Path(harness.__file__).read_text(encoding="utf-8")
_MAX_PROCESSES = 8
_STDOUT_CAP = 64_000
_REPLY_CAP = 8 * 1024 * 1024
_REL_TOL, _ABS_TOL = 1e-6, 1e-9
_FENCE = re.compile(r"```[ \t]*([\w+.-]*)[^\n]*\n(.*?)```", re.DOTALL)


def make_code_reward(
    *,
    timeout_s: float = 6.0,
    memory_mb: int = 512,
    max_parallel: int | None = None,
    isolation: str = "auto",
    packages: tuple[str, ...] = (),
) -> RewardFn:
    """A code reward whose tests each get ``timeout_s`` of wall time and ``memory_mb`` of address space per
    process. At most ``max_parallel`` tests run at once (default: the CPU count, at most 4) over all the
    calls of the returned function, from any thread: the workflows score episodes concurrently. The
    returned function blocks; ``acode_reward`` is the same for asyncio code.

    Refuses here, not mid-run, with ``SandboxUnavailable`` when ``isolation`` does not work on this
    machine: ``auto`` is bubblewrap, which hides the project and its answers; a weaker one (``none``,
    ``unshare``: the host's filesystem is readable) must be asked for by name or ``$RLLM_SANDBOX_ISOLATION``.

    ``packages`` are the top-level packages the programs (and assert tests) may import besides the standard
    library, e.g. ``("numpy",)``: each is named, dependencies are not followed, and one that cannot be let
    in (``rllm``, not installed, an editable install into a project) raises ``PackageNotAllowed`` here."""
    settings = _Settings.of(timeout_s, memory_mb, max_parallel, isolation, packages)
    # Blocks once per isolation while it probes; raises if it cannot run or a package is refused.
    sandbox.protections(isolation, packages=settings.packages)

    def reward(task: dict[str, Any], response: str) -> Outcome:
        return sandbox.run_blocking(_grade(task, response, settings))

    return reward


async def acode_reward(
    task: dict[str, Any],
    response: str,
    *,
    timeout_s: float = 6.0,
    memory_mb: int = 512,
    max_parallel: int | None = None,
    isolation: str = "auto",
    packages: tuple[str, ...] = (),
) -> Outcome:
    """``make_code_reward(...)(task, response)`` for asyncio code: the event loop runs on meanwhile.
    ``max_parallel`` bounds the tests of this one call."""
    settings = _Settings.of(timeout_s, memory_mb, max_parallel, isolation, packages)
    return await _grade(task, response, settings)


def extract_program(response: str) -> str | None:
    """The program in a response: after the thinking (``strip_thinking``; unfinished thinking means no
    program), the last ```python block, else the last fenced block of any language, else the whole text if
    it compiles as Python; None when there is none."""
    text = strip_thinking(response)
    if text is None:
        return None
    blocks = _FENCE.findall(text)
    python = [code for language, code in blocks if language.lower() in ("python", "py", "python3")]
    if python or blocks:
        return (python or [code for _, code in blocks])[-1]
    text = text.strip()
    return text if text and _compile_error(text) is None else None


# --- grading ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Settings:
    timeout_s: float
    memory_mb: int
    isolation: str
    packages: tuple[str, ...]
    slots: threading.BoundedSemaphore  # shared by every call that uses these settings, in any thread

    @classmethod
    def of(
        cls,
        timeout_s: float,
        memory_mb: int,
        max_parallel: int | None,
        isolation: str,
        packages: tuple[str, ...],
    ) -> _Settings:
        if max_parallel is not None and max_parallel < 1:
            raise ValueError(f"max_parallel must be at least 1, got {max_parallel}")
        slots = threading.BoundedSemaphore(max_parallel or min(4, os.cpu_count() or 1))
        return cls(timeout_s, memory_mb, isolation, packages, slots)

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """One of the ``max_parallel`` slots. Polled rather than waited for in a thread: calls come from
        several threads and event loops, and a blocked executor thread could be one a holder needs."""
        while not self.slots.acquire(blocking=False):
            await asyncio.sleep(0.02)
        try:
            yield
        finally:
            self.slots.release()

    def sandbox_kwargs(self, timeout_s: float | None = None) -> dict[str, Any]:
        return {
            "timeout_s": timeout_s or self.timeout_s,
            "memory_mb": self.memory_mb,
            "max_processes": _MAX_PROCESSES,
            "isolation": self.isolation,
            "packages": self.packages,
        }


async def _grade(task: dict[str, Any], response: str, settings: _Settings) -> Outcome:
    tests, entry_point = _parse_ground_truth(task)
    program = extract_program(response)
    problem = "no program found in the response" if program is None else _compile_error(program)
    if problem is not None:
        records = [_record(test, False, "compile_error", message=problem) for test in tests]
    else:
        assert program is not None

        async def run(test: dict[str, Any]) -> dict[str, Any]:
            async with settings.slot():
                return await _RUNNERS[test["type"]](program, test, entry_point, settings)

        records = list(await asyncio.gather(*(run(test) for test in tests)))
    passed = sum(record["passed"] for record in records)
    protections = await asyncio.to_thread(
        sandbox.protections,
        settings.isolation,
        **{k: v for k, v in settings.sandbox_kwargs().items() if k != "isolation"},
    )
    info = {
        "passed": passed,
        "total": len(records),
        "program_found": program is not None,
        "tests": records,
        "isolation": protections["isolation"],
        "protections": protections,
    }
    # Which isolation graded this episode, as a step metric (the mean over a step: the share under it).
    metrics = {f"reward/code/isolation/{protections['isolation']}": 1.0}
    return Outcome(
        reward=passed / len(records), is_correct=passed == len(records), info=info, metrics=metrics
    )


async def _stdio(
    program: str, test: dict[str, Any], entry_point: str | None, settings: _Settings
) -> dict[str, Any]:
    expected = test["output"]
    result = await arun_python(
        program,
        stdin=test["input"],
        max_output_bytes=max(_STDOUT_CAP, 2 * len(expected.encode()) + 4096),
        **settings.sandbox_kwargs(),
    )
    passed = result.ok and _normalize_output(result.stdout) == _normalize_output(expected)
    error = None if passed else _failure(result) or "wrong_answer"
    return _record(test, passed, error, result)


async def _call(
    program: str, test: dict[str, Any], entry_point: str | None, settings: _Settings
) -> dict[str, Any]:
    assert entry_point is not None  # checked by _parse_ground_truth
    request = harness.dump_line(
        {
            "call": entry_point,
            "args": harness.encode(test["args"]),
            "kwargs": harness.encode(test.get("kwargs", {})),
        }
    )
    result = await arun_python(
        _HARNESS,
        stdin=request.decode(),
        files={"solution.py": program},
        args=["serve", "solution.py", entry_point, "0", "1"],
        max_output_bytes=_REPLY_CAP,
        **settings.sandbox_kwargs(),
    )
    if result.timed_out or result.killed_reason == "cpu_time":
        return _record(test, False, "timeout", result)
    try:
        hello, reply = (json.loads(line) for line in result.stdout.split("\n")[:2])
        if "load_error" in hello:
            return _record(test, False, _kind(hello["load_error"]), result, message=str(hello.get("message")))
        if "raise" in reply:
            kind = "memory" if reply["raise"] == "MemoryError" else "runtime_error"
            return _record(test, False, kind, result, message=f"{reply['raise']}: {reply.get('message')}")
        got = harness.decode(reply["value"])
        passed = _same(got, test["expected"])
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return _record(test, False, _failure(result) or "runtime_error", result)
    message = "" if passed else f"returned {reprlib.repr(got)}, expected {reprlib.repr(test['expected'])}"
    return _record(test, passed, None if passed else "wrong_answer", result, message=message)


async def _assert(
    program: str, test: dict[str, Any], entry_point: str | None, settings: _Settings
) -> dict[str, Any]:
    request_r, request_w = os.pipe()
    reply_r, reply_w = os.pipe()
    entry = entry_point or ""
    started = False

    async def serve() -> SandboxResult:
        nonlocal started
        started = True  # from here arun_python owns (and closes) its pipe ends
        # It outlives the checker by a second, so a slow program shows up as the checker's timeout.
        return await arun_python(
            _HARNESS,
            files={"solution.py": program},
            args=["serve", "solution.py", entry, str(request_r), str(reply_w)],
            pass_fds=(request_r, reply_w),
            max_output_bytes=_STDOUT_CAP,
            **settings.sandbox_kwargs(settings.timeout_s + 1),
        )

    candidate = asyncio.ensure_future(serve())
    verdict: dict[str, Any] = {}
    try:
        checker = await arun_python(
            _HARNESS,
            files={"test.py": test["code"]},
            args=["check", "test.py", entry, str(request_w), str(reply_r)],
            pass_fds=(request_w, reply_r),
            max_output_bytes=_STDOUT_CAP,
            **settings.sandbox_kwargs(),
        )
        with contextlib.suppress(ValueError, IndexError):
            verdict = json.loads(checker.stdout.strip().splitlines()[-1])
        if type(verdict) is not dict:
            verdict = {}
        if verdict.get("error") == "candidate_died" and not candidate.done():
            await asyncio.wait({candidate}, timeout=1.0)  # it is dying: let it say why
    finally:
        candidate.cancel()
        await asyncio.wait({candidate})
        if not started:  # cancelled before it ran: its pipe ends are still ours to close
            os.close(request_r)
            os.close(reply_w)
    served = None if candidate.cancelled() or candidate.exception() else candidate.result()
    passed, error, message = False, verdict.get("error"), str(verdict.get("message", ""))
    if checker.timed_out:
        error, message = "timeout", ""
    elif verdict.get("passed") is True and checker.exit_code == 0:
        passed, error = True, None
    elif not verdict:  # the checker itself failed (a broken test, or out of memory reading a huge value)
        error, message = _failure(checker) or "runtime_error", checker.stderr
    elif error == "candidate_died" or error not in _ERRORS:
        error = (_failure(served) if served else None) or "runtime_error"
    record = _record(test, passed, error, served, message=message)
    record["duration_s"] = round(checker.duration_s, 3)  # the test's time, checker and program together
    return record


_RUNNERS: dict[str, Callable[[str, dict[str, Any], str | None, _Settings], Awaitable[dict[str, Any]]]] = {
    "stdio": _stdio,
    "call": _call,
    "assert": _assert,
}


_ERRORS = ("wrong_answer", "timeout", "runtime_error", "memory", "compile_error")


def _kind(error: Any) -> str:
    """``error`` if it is one of ``_ERRORS`` (it may come from the program's process), else runtime_error."""
    return error if error in _ERRORS else "runtime_error"


def _failure(result: SandboxResult) -> str | None:
    """Why a run failed, when it did not simply exit normally."""
    if result.timed_out or result.killed_reason == "cpu_time":
        return "timeout"
    if result.memory_exceeded:
        return "memory"
    if result.exit_code != 0:
        return "runtime_error"
    return None


def _record(
    test: dict[str, Any],
    passed: bool,
    error: str | None,
    result: SandboxResult | None = None,
    message: str = "",
) -> dict[str, Any]:
    """One test's entry in ``info["tests"]``, short enough to log for every rollout. ``stdout`` only for stdio
    tests: in call and assert tests the harness sends what the program prints to ``stderr``."""
    record: dict[str, Any] = {"type": test["type"], "passed": passed, "error": error}
    if message:
        record["message"] = message[-500:]
    if result is not None:
        if test["type"] == "stdio":
            record["stdout"] = result.stdout[:300]
        record["stderr"] = result.stderr[-500:]
        record["duration_s"] = round(result.duration_s, 3)
    return record


# --- comparisons --------------------------------------------------------------------------------------


def _normalize_output(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.replace("\r\n", "\n").rstrip().split("\n"))


def _same(got: Any, expected: Any) -> bool:
    """``got`` (decoded plain data) equals ``expected`` (JSON data) as JSON would see it, floats within a
    small tolerance."""
    if isinstance(got, tuple):
        got = list(got)
    numbers = (int, float)
    if isinstance(got, float) or isinstance(expected, float):
        if not (isinstance(got, numbers) and isinstance(expected, numbers)):
            return False
        try:
            both_nan = math.isnan(got) and math.isnan(expected)
            return both_nan or math.isclose(got, expected, rel_tol=_REL_TOL, abs_tol=_ABS_TOL)
        except OverflowError:  # an int too large for a float
            return False
    if isinstance(expected, list):
        return isinstance(got, list) and len(got) == len(expected) and all(map(_same, got, expected))
    if isinstance(expected, dict):
        if not isinstance(got, dict):
            return False
        got = {_json_key(key): value for key, value in got.items()}
        return got.keys() == expected.keys() and all(_same(got[key], expected[key]) for key in expected)
    return type(got) in (type(None), bool, int, str) and got == expected


def _json_key(key: Any) -> Any:
    """The key ``json.dumps`` would have written for ``key`` (JSON object keys are strings)."""
    if isinstance(key, (bool, int, float, type(None))):
        return json.dumps(key)
    return key


def _compile_error(program: str) -> str | None:
    """Why ``program`` does not compile, or None. Compiling runs none of its code."""
    try:
        compile(program, "solution.py", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as e:
        return f"{type(e).__name__}: {e}"
    return None


# --- the task's tests ---------------------------------------------------------------------------------


# Whether a test of each type has its fields, of the right types.
_TEST_FIELDS_OK: dict[str, Callable[[dict[str, Any]], bool]] = {
    "stdio": lambda t: isinstance(t.get("input"), str) and isinstance(t.get("output"), str),
    "call": lambda t: (
        isinstance(t.get("args"), list) and isinstance(t.get("kwargs", {}), dict) and "expected" in t
    ),
    "assert": lambda t: isinstance(t.get("code"), str),
}


def _parse_ground_truth(task: dict[str, Any]) -> tuple[list[dict[str, Any]], str | None]:
    """The tests and entry point of ``task``; ValueError naming the task when they are malformed."""
    task_id = task.get("task_id", "?")

    def malformed(why: str) -> ValueError:
        return ValueError(
            f"task {task_id!r}: ground_truth {why} (expected "
            '{"tests": [...], "entry_point": name or None}; see rllm.rewards.code)'
        )

    truth = task.get("ground_truth")
    if isinstance(truth, str):
        try:
            truth = json.loads(truth)
        except ValueError:
            raise malformed("is a string but not JSON") from None
    if not isinstance(truth, dict):
        raise malformed(f"is a {type(truth).__name__}, not a dict")
    tests, entry_point = truth.get("tests"), truth.get("entry_point")
    if not isinstance(tests, list) or not tests:
        raise malformed("has no tests")
    if entry_point is not None and not (isinstance(entry_point, str) and entry_point.isidentifier()):
        raise malformed(f"has entry_point {entry_point!r}, not a Python name or None")
    for i, test in enumerate(tests):
        kind = test.get("type") if isinstance(test, dict) else None
        if not isinstance(kind, str) or kind not in _TEST_FIELDS_OK:
            raise malformed(f"tests[{i}] has type {kind!r}, not 'stdio', 'call' or 'assert'")
        if kind == "call" and entry_point is None:
            raise malformed(f"has a call test (tests[{i}]) but no entry_point")
        if not _TEST_FIELDS_OK[kind](test):
            raise malformed(f"tests[{i}] ({kind}) lacks a field or has one of the wrong type")
    return tests, entry_point


@functools.cache
def _default() -> RewardFn:
    return make_code_reward()


def __getattr__(name: str) -> Any:
    """``code_reward``: the code reward with the default limits of ``make_code_reward``, built (and its
    sandbox checked, refusing without real isolation) when first imported or looked up, not at import."""
    if name == "code_reward":
        return _default()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
