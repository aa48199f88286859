"""rllm.rewards.code: finding the program, the three test shapes (stdio, call, assert) with HumanEval- and
MBPP-shaped tasks, per-test results and error kinds, malformed ground truth, and the value codec."""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

import pytest
from ci_support import skip_or_fail

from rllm.rewards import _code_harness as harness
from rllm.rewards.code import acode_reward, code_reward, extract_program, make_code_reward
from rllm.rewards.registry import get_reward
from rllm.sandbox import SandboxUnavailable, protections

_fast = make_code_reward(timeout_s=2.0, memory_mb=256, max_parallel=2)


@pytest.fixture(autouse=True)
def _needs_a_sandbox() -> None:
    """The code reward runs programs in the sandbox: skip without one, fail under CI (whose set-up installs
    bubblewrap)."""
    try:
        protections()
    except SandboxUnavailable as e:
        skip_or_fail(f"no sandbox on this machine: {e}")


def _task(tests: list[dict[str, Any]], entry_point: str | None = None, task_id: str = "t") -> dict[str, Any]:
    return {"task_id": task_id, "ground_truth": {"tests": tests, "entry_point": entry_point}}


def _python(code: str) -> str:
    return f"Here is my solution.\n\n```python\n{code}\n```\n"


# --- finding the program ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("response", "program"),
    [
        ("```python\na = 1\n```\ntext\n```python\nb = 2\n```", "b = 2\n"),
        ("```python\na = 1\n```\n```text\nnot code\n```", "a = 1\n"),
        ("```\nx = 3\n```", "x = 3\n"),
        ("```py\nx = 4\n```", "x = 4\n"),
        ("def f():\n    return 1\n", "def f():\n    return 1"),
        ("<think>\n```python\nwrong = 1\n```\n</think>\n```python\nright = 1\n```", "right = 1\n"),
        ("reasoning in the prompt's open tag</think>\nprint(1)", "print(1)"),
        ("```python\nok = 1\n```<think>\n```python\nunfinished = 1\n```", None),  # thinking never ended
        ("I cannot solve this, sorry.", None),
        ("", None),
    ],
)
def test_extract_program(response: str, program: str | None) -> None:
    assert extract_program(response) == program


# --- the three test shapes --------------------------------------------------------------------------


def test_stdio_tests_compare_output_without_trailing_whitespace() -> None:
    task = _task(
        [
            {"type": "stdio", "input": "1 2\n", "output": "3\n"},
            {"type": "stdio", "input": "5 5\n", "output": "10"},
            {"type": "stdio", "input": "2 2\n", "output": "5\n"},
        ]
    )
    program = "a, b = map(int, input().split())\nprint(a + b, '  ')\nprint()\n"
    result = _fast(task, _python(program))
    assert [t["passed"] for t in result.info["tests"]] == [True, True, False]
    assert result.reward == pytest.approx(2 / 3) and not result.is_correct
    assert result.info["tests"][2]["error"] == "wrong_answer"
    assert result.info["tests"][2]["stdout"] == "4   \n\n"
    assert (result.info["passed"], result.info["total"]) == (2, 3)


def test_call_tests_compare_returned_values_as_json() -> None:
    task = _task(
        [
            {"type": "call", "args": [[3, 1, 2]], "expected": [1, 2, 3]},
            {"type": "call", "args": [[1, 2]], "kwargs": {"reverse": True}, "expected": [2, 1]},
            {"type": "call", "args": [[0.1, 0.2]], "expected": 0.3, "id": "float tolerance"},
            {"type": "call", "args": [[2, 2]], "expected": {"2": 2}},
            {"type": "call", "args": [[1]], "expected": [1, 2]},
        ],
        entry_point="solve",
    )
    program = (
        "def solve(xs, reverse=False):\n"
        "    if len(xs) == 2 and xs[0] == xs[1]:\n        return {xs[0]: sum(xs) // 2}\n"  # int keys
        "    if isinstance(xs[0], float):\n        return xs[0] + xs[1]\n"  # 0.30000000000000004
        "    return tuple(sorted(xs, reverse=reverse))\n"  # a tuple counts as a list
    )
    result = _fast(task, _python(program))
    assert [t["passed"] for t in result.info["tests"]] == [True, True, True, True, False]
    assert result.info["tests"][4]["error"] == "wrong_answer"
    assert result.info["tests"][4]["message"] == "returned (1,), expected [1, 2]"


def test_call_tests_reach_a_leetcode_style_solution_class() -> None:
    task = _task([{"type": "call", "args": [[2, 7, 11, 15], 9], "expected": [0, 1]}], entry_point="twoSum")
    program = (
        "class Solution:\n"
        "    def twoSum(self, nums, target):\n"
        "        seen = {}\n"
        "        for i, n in enumerate(nums):\n"
        "            if target - n in seen:\n                return [seen[target - n], i]\n"
        "            seen[n] = i\n"
    )
    assert _fast(task, _python(program)).is_correct


_HUMANEVAL_TEST = """

METADATA = {"author": "jt", "dataset": "test"}


def check(candidate):
    assert candidate([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3) == True
    assert candidate([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.05) == False
    assert candidate([1.0, 2.0, 5.9, 4.0, 5.0], 0.95) == True
    assert candidate([1.1, 2.2, 3.1, 4.1, 5.1], 1.0) == True
"""


def test_humaneval_shaped_task() -> None:
    task = _task(
        [{"type": "assert", "code": _HUMANEVAL_TEST + "\ncheck(has_close_elements)"}],
        entry_point="has_close_elements",
        task_id="HumanEval/0",
    )
    right = (
        "from typing import List\n\n\n"
        "def has_close_elements(numbers: List[float], threshold: float) -> bool:\n"
        "    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1:])\n"
    )
    wrong = right.replace("< threshold", "< threshold / 10")
    assert code_reward(task, _python(right)).is_correct
    failed = code_reward(task, _python(wrong))
    assert failed.reward == 0.0 and failed.info["tests"][0]["error"] == "wrong_answer"
    failing_line = "assert candidate([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3) == True"
    assert failing_line in failed.info["tests"][0]["message"]


def test_mbpp_shaped_task_scores_each_assert() -> None:
    asserts = [
        "assert set(similar_elements((3, 4, 5, 6), (5, 7, 4, 10))) == {4, 5}",
        "assert set(similar_elements((1, 2, 3, 4), (5, 4, 3, 7))) == {3, 4}",
        "assert set(similar_elements((11, 12, 14, 13), (17, 15, 14, 13))) == {13, 14}",
    ]
    task = _task([{"type": "assert", "code": line} for line in asserts], task_id="MBPP/2")
    almost = "def similar_elements(a, b):\n    return tuple(x for x in a if x in b and x < 12)\n"
    result = _fast(task, _python(almost))
    assert [t["passed"] for t in result.info["tests"]] == [True, True, False]
    assert result.reward == pytest.approx(2 / 3)


def test_assert_tests_see_the_programs_helper_functions_and_plain_data_round_trips() -> None:
    task = _task(
        [
            {
                "type": "assert",
                "code": "assert decode(encode('hello')) == 'hello'\nassert encode('ab') == 'ba'",
            },
            {
                "type": "assert",
                "code": "assert kinds() == ({1, 2}, frozenset({3}), b'x', 1 + 2j, (None, True), {(1, 2): [3.5]})",
            },
            {"type": "assert", "code": "assert big() == 7 ** 9000 and len(str(big())) > 7000"},
            {
                "type": "assert",
                "code": "try:\n    fail()\nexcept ValueError as e:\n    assert 'bad' in str(e)\n"
                "else:\n    raise AssertionError",
            },
        ]
    )
    program = (
        "def encode(s):\n    return s[::-1]\n"
        "def decode(s):\n    return encode(s)\n"
        "def kinds():\n    return ({1, 2}, frozenset({3}), b'x', 1 + 2j, (None, True), {(1, 2): [3.5]})\n"
        "def big():\n    return 7 ** 9000\n"
        "def fail():\n    raise ValueError('bad input')\n"
    )
    result = _fast(task, _python(program))
    assert result.is_correct, result.info["tests"]


def test_tests_run_in_parallel() -> None:
    task = _task([{"type": "assert", "code": "assert nap() == 1"}] * 4)
    start = time.perf_counter()
    program = _python("import time\ndef nap():\n    time.sleep(1)\n    return 1\n")
    result = make_code_reward(timeout_s=5, max_parallel=4)(task, program)
    assert result.is_correct and time.perf_counter() - start < 3.5  # not the 4 s of one after another


# --- failures and their kinds ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        ("return x + 1", "wrong_answer"),
        ("raise KeyError(x)", "runtime_error"),
        ("return bytearray(10**10)", "memory"),
        ("while True:\n        pass", "timeout"),
    ],
)
def test_error_kinds_for_call_and_assert_tests(body: str, kind: str) -> None:
    task = _task(
        [{"type": "call", "args": [1], "expected": 1}, {"type": "assert", "code": "assert f(1) == 1"}],
        entry_point="f",
    )
    result = make_code_reward(timeout_s=1.0, memory_mb=256)(task, _python(f"def f(x):\n    {body}\n"))
    assert [t["error"] for t in result.info["tests"]] == [kind, kind], result.info["tests"]
    assert result.reward == 0.0


def test_error_kinds_for_stdio_tests() -> None:
    tests = [{"type": "stdio", "input": "", "output": "ok"}]
    fast = make_code_reward(timeout_s=1.0, memory_mb=256)
    crashed = fast(_task(tests), _python("print('ok')\nraise SystemExit(1)"))
    assert crashed.info["tests"][0]["error"] == "runtime_error"
    assert fast(_task(tests), _python("import time\ntime.sleep(10)")).info["tests"][0]["error"] == "timeout"
    assert fast(_task(tests), _python("x = 'a' * 10**10")).info["tests"][0]["error"] == "memory"


def test_a_program_that_does_not_compile_fails_every_test_without_running() -> None:
    task = _task([{"type": "stdio", "input": "", "output": "1"}, {"type": "assert", "code": "assert True"}])
    result = code_reward(task, _python("def f(:\n    pass"))
    assert [t["error"] for t in result.info["tests"]] == ["compile_error", "compile_error"]
    assert "SyntaxError" in result.info["tests"][0]["message"] and "duration_s" not in result.info["tests"][0]
    nothing = code_reward(task, "I do not know.")
    assert nothing.reward == 0.0 and nothing.info["program_found"] is False


def test_missing_entry_point_is_a_runtime_error() -> None:
    task = _task(
        [{"type": "call", "args": [], "expected": 1}, {"type": "assert", "code": "assert True"}],
        entry_point="solve",
    )
    result = _fast(task, _python("def other():\n    return 1\n"))
    assert [t["error"] for t in result.info["tests"]] == ["runtime_error", "runtime_error"]


def test_info_is_json_and_names_the_protections() -> None:
    task = _task([{"type": "stdio", "input": "", "output": "hi"}])
    result = code_reward(task, _python("print('hi')"))
    assert result.reward == 1.0 and result.is_correct
    info = json.loads(json.dumps(result.info))
    assert info["protections"]["isolation"] in ("bwrap", "unshare", "none")
    assert set(info["tests"][0]) >= {"type", "passed", "error", "stdout", "stderr", "duration_s"}


def test_no_descriptors_leak() -> None:
    task = _task(
        [
            {"type": "stdio", "input": "", "output": "1"},
            {"type": "call", "args": [], "expected": 1},
            {"type": "assert", "code": "assert f() == 1"},
        ],
        entry_point="f",
    )
    program = _python("def f():\n    return 1\nprint(1)")
    _fast(task, program)  # the first run may open long-lived things (the event loop's, the probe's)
    before = sorted(os.listdir("/proc/self/fd"))
    assert _fast(task, program).is_correct
    assert make_code_reward(timeout_s=0.5)(task, _python("import time\ntime.sleep(5)")).reward == 0.0
    assert sorted(os.listdir("/proc/self/fd")) == before


def test_async_variant_and_registry() -> None:
    truth = json.dumps({"tests": [{"type": "stdio", "input": "", "output": "7"}]})
    task = {"task_id": "j", "ground_truth": truth}
    assert asyncio.run(acode_reward(task, _python("print(7)"))).is_correct  # ground truth as a JSON string
    assert get_reward("code") is code_reward


# --- malformed tasks ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ground_truth", "message"),
    [
        (None, "is a NoneType"),
        ("{not json", "not JSON"),
        ({"tests": []}, "has no tests"),
        ({"tests": [{"type": "unit"}]}, "type 'unit'"),
        ({"tests": [{"type": "call", "args": [], "expected": 1}]}, "no entry_point"),
        ({"tests": [{"type": "stdio", "input": 1, "output": "1"}]}, r"tests\[0\] \(stdio\)"),
        ({"tests": [{"type": "assert"}]}, r"tests\[0\] \(assert\)"),
        ({"tests": [{"type": "assert", "code": ""}], "entry_point": "not a name"}, "entry_point"),
    ],
)
def test_malformed_ground_truth_raises_with_the_task_id(ground_truth: Any, message: str) -> None:
    task = {"task_id": "broken-7", "ground_truth": ground_truth}
    with pytest.raises(ValueError, match=rf"task 'broken-7': ground_truth .*{message}"):
        code_reward(task, _python("pass"))


# --- the codec ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        0,
        -(2**70),
        pytest.param(3**20000, id="huge-int"),
        1.5,
        float("inf"),
        "é\ud800",
        b"\0\xff",
        2 - 1j,
        [1, [2]],
        (1, (2,)),
        {1, "a"},
        frozenset({(1, 2)}),
        {"a": 1, 2: [None], (3,): {4: 5}},
    ],
)
def test_codec_round_trips_plain_data_exactly(value: Any) -> None:
    line = harness.dump_line({"value": harness.encode(value)})
    back = harness.decode(json.loads(line)["value"])
    assert back == value and type(back) is type(value)


@pytest.mark.parametrize("value", [type("Sub", (int,), {})(1), object(), [1, iter([])], {"k": len}])
def test_codec_refuses_anything_but_plain_data(value: Any) -> None:
    with pytest.raises(harness.EncodeError):
        harness.encode(value)


@pytest.mark.parametrize("data", [{"tuple": 1}, {"evil": []}, {"a": [], "b": []}, {"dict": [[1]]}])
def test_codec_refuses_malformed_data(data: Any) -> None:
    with pytest.raises(ValueError):
        harness.decode(data)
