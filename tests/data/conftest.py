"""A plain subprocess runner for code ground truths, independent of ``rllm.rewards.code``.

It checks our own data (built-in code problems, converted HumanEval/MBPP rows) against their reference
solutions: one subprocess per call runs every test of one solution and reports which passed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

_HARNESS = r"""
import contextlib, io, json, sys

spec = json.load(sys.stdin)
results = []
for test in spec["tests"]:
    try:
        if test["type"] == "stdio":
            out, saved = io.StringIO(), sys.stdin
            sys.stdin = io.StringIO(test["input"])
            try:
                with contextlib.redirect_stdout(out):
                    exec(spec["solution"], {"__name__": "__main__"})
            finally:
                sys.stdin = saved
            ok = out.getvalue() == test["output"]
        elif test["type"] == "call":
            namespace = {"__name__": "solution"}
            exec(spec["solution"], namespace)
            ok = namespace[spec["entry_point"]](*test["args"], **test["kwargs"]) == test["expected"]
        else:
            exec(spec["solution"] + "\n" + test["code"], {"__name__": "__main__"})
            ok = True
    except BaseException:
        ok = False
    results.append(ok)
print(json.dumps(results))
"""


def run_code_tests(solution: str, ground_truth: dict[str, Any], timeout_s: float = 30.0) -> list[bool]:
    """Whether each test of a code ground truth passes with ``solution``."""
    spec = {"solution": solution, **ground_truth}
    result = subprocess.run(
        [sys.executable, "-c", _HARNESS],
        input=json.dumps(spec),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture
def code_runner() -> Callable[[str, dict[str, Any]], list[bool]]:
    return run_code_tests


@pytest.fixture(autouse=True)
def _no_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test here reaches the real Hugging Face hub: the hub client is offline (so ``pull`` skips its
    reachability probe), and a test that wants the probe points HF_ENDPOINT at loopback."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
