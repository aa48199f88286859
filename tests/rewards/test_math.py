"""The math reward: answer extraction, equivalence through math_verify, time bounds, the reward options."""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from rllm.rewards import _bounded
from rllm.rewards.math import (
    extract_answer,
    grade_answer,
    ground_truth_problem,
    make_math_reward,
    math_reward,
    usable_ground_truths,
)
from rllm.rewards.registry import get_reward

# (prediction, ground truth): graded equal in both argument orders
EQUIVALENT = [
    ("\\frac12", "0.5"),
    ("1/2", "0.5"),
    ("\\dfrac{1}{2}", "1/2"),
    ("\\frac{2}{4}", "\\frac{1}{2}"),
    ("-\\frac{1}{2}", "\\frac{-1}{2}"),
    ("2\\sqrt{2}", "\\sqrt{8}"),
    ("3\\sqrt{3}", "\\sqrt{27}"),
    ("\\frac{\\sqrt{2}}{2}", "1/\\sqrt{2}"),
    ("sqrt(2)", "\\sqrt{2}"),
    ("x^2+2x+1", "(x+1)^2"),
    ("\\frac{1}{2}x", "x/2"),
    ("(1, 2]", "(1,2]"),
    ("[0,\\infty)", "[0, \\infty)"),
    ("\\{1,2,3\\}", "\\{3,2,1\\}"),
    ("1, 2", "2, 1"),
    ("(3, -1)", "(3,-1)"),
    ("x=1 \\text{ or } x=2", "1, 2"),
    ("5 \\text{ cm}", "5"),
    ("5 \\text{dollars}", "5"),
    ("\\$5", "5"),
    ("5 dollars", "5"),
    ("12 apples", "12"),
    ("90^\\circ", "90"),
    ("90°", "90"),
    ("1,000", "1000"),
    ("1\\,000", "1000"),
    ("1{,}000", "1000"),
    ("1.5\\times10^3", "1500"),
    ("1.5e3", "1500"),
    ("1.6e-19", "1.6\\times10^{-19}"),
    ("50\\%", "0.5"),
    ("50\\%", "50"),
    ("50 percent", "1/2"),
    ("0.333333", "1/3"),
    ("0.0125", "1/80"),
    ("2\\pi", "6.283185"),
    ("2 pi", "2\\pi"),
    ("\\sqrt{3}", "1.7320508"),
    ("-3", "-3.0"),
    ("$\\frac{1}{2}$", "0.5"),
    ("5.", "5"),
    ("2^{10}", "1024"),
    ("10!", "3628800"),
    ("\\binom{5}{2}", "10"),
    ("\\log_2 8", "3"),
    ("x \\in (1, 2]", "(1,2]"),
    ("∞", "\\infty"),
    ("\\mathbb{R}", "(-\\infty, \\infty)"),
    ("2+3", "5"),
]

# graded equal with the prediction first only: math_verify follows the reference's form
EQUIVALENT_ONE_WAY = [
    ("x=3", "3"),  # an assignment to the variable asked for
    ("x > 1", "(1, \\infty)"),  # a solution set written as an inequality
]

# (prediction, ground truth): graded different in both argument orders
NOT_EQUIVALENT = [
    ("1/2", "2"),
    ("2", "12"),
    ("0.5", "0.05"),
    ("5", "0.05"),
    ("-3", "3"),
    ("-0.5", "0.5"),
    ("-\\infty", "\\infty"),
    ("x+1", "x-1"),
    ("y+1", "x+1"),
    ("(1,2)", "[1,2]"),
    ("[1,2)", "[1,2]"),
    ("(2,3)", "(3,2)"),
    ("(-1,3)", "(3,-1)"),
    ("0.33", "1/3"),  # truncated beyond 6 decimal places
    ("3.14", "\\pi"),
    ("3.14159", "3.14"),
    ("1.0000001", "1"),
    ("1.001", "1"),
    ("1e-8", "2e-8"),  # 6 decimal places alone would call both 0
    ("0.00000001", "0.00000002"),
    ("1.6\\times10^{-19}", "3.2\\times10^{-19}"),
    ("\\frac{1}{10^{20}}", "\\frac{2}{10^{20}}"),
    ("\\sqrt{3}", "1.732"),
    ("\\frac{\\pi}{2}", "90^\\circ"),
    ("1 or 2", "1"),  # listing candidates earns nothing
    ("1, 2", "2"),
    ("1 \\text{ or } 2", "2"),
    ("5 or six", "5"),
    ("1, 2", "1, 2, 3"),
    ("12", "1 2"),
    ("i", "-i"),
    ("A", "B"),
    ("5x", "5"),  # a free variable is not a number
    ("5+x", "5"),
    ("x", "5"),
    ("\\pm 5", "5"),
    ("\\infty", "5"),
    ("0", "0.0000001"),
    ("", "5"),
    ("   ", "5"),
]


@pytest.mark.parametrize(("prediction", "truth"), EQUIVALENT)
def test_equivalent(prediction: str, truth: str) -> None:
    assert grade_answer(prediction, truth)
    assert grade_answer(truth, prediction)


@pytest.mark.parametrize(("prediction", "truth"), EQUIVALENT_ONE_WAY)
def test_equivalent_one_way(prediction: str, truth: str) -> None:
    assert grade_answer(prediction, truth)


@pytest.mark.parametrize(("prediction", "truth"), NOT_EQUIVALENT)
def test_not_equivalent(prediction: str, truth: str) -> None:
    assert not grade_answer(prediction, truth)
    if truth.strip() and prediction.strip():
        assert not grade_answer(truth, prediction)


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("so it is \\boxed{\\frac{1}{2}}.", "\\frac{1}{2}"),
        ("$\\boxed{\\{1, 2\\}}$", "\\{1, 2\\}"),  # escaped braces are not groups
        ("\\boxed{\\begin{pmatrix}1\\\\2\\end{pmatrix}}", "\\begin{pmatrix}1\\\\2\\end{pmatrix}"),
        ("first \\boxed{3}, then on reflection \\boxed{5}", "5"),  # the last box
        ("\\fbox{7}", "7"),
        ("so \\boxed 5.", "5"),
        ("$\\boxed{1}$ or $\\boxed{2}$", "1, 2"),  # adjacent boxes state one answer together
        ("\\boxed{5} \\boxed{5}", "5"),
        ("\\boxed{4} but then \\boxed{}", "4"),  # an empty box is not an answer
        ("\\boxed{4} then \\boxed{9", "4"),  # nor is one that never closes
        ("Answer: 42", "42"),
        ("**Answer:** 7", "7"),
        ("The answer is $\\frac{1}{2}$ since x > 0.", "\\frac{1}{2}"),
        ("The answer is 3.5. Done.", "3.5"),
        ("Final Answer: The final answer is $5$. I hope it is correct.", "5"),
        ("answer: 1\nso the answer is 2\n", "2"),  # the last one
        ("\\boxed{3}\nAnswer: 4", "3"),  # a box comes first
        ("Natalia sold 48/2 = 24 clips.\n#### 1,024", "1,024"),
        ("we get 3 apples and then 4.5 pears", "4.5"),
        ("x = -7", "-7"),
        ("3-5", "5"),  # a minus between numbers is not a sign
        ("by 1,000 units", "1,000"),
    ],
)
def test_extract_answer(text: str, answer: str) -> None:
    assert extract_answer(text) == answer


def test_extraction_is_linear_on_adversarial_text() -> None:
    text = "so " * 40_000 + "\\boxed{" * 5_000 + "{" * 10_000 + "Answer:\n" * 2_000 + "#### " * 2_000
    start = time.monotonic()
    assert extract_answer(text) is None
    assert extract_answer(text + "\\boxed{7}") == "7"
    assert time.monotonic() - start < 2.0


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("<think>maybe \\boxed{1}</think>so \\boxed{2}", "2"),
        ("<think>it is 41</think>The answer is 42", "42"),
        ("the chat template opened the block: 41</think> \\boxed{42}", "42"),  # only the close is generated
        ("<think>it is \\boxed{41} but I am still thinking", None),  # unclosed: no answer
        ("<think>a</think> then <think>b \\boxed{3}", None),  # reopened, never closed
        ("<think>it is 41</think>", None),
        ("no numbers here", None),
        ("v2 of the plan", None),  # a digit inside a word is not a number
    ],
)
def test_extract_answer_think_and_none(text: str, answer: str | None) -> None:
    assert extract_answer(text) == answer


def test_math_reward_info() -> None:
    task = {"task_id": "t1", "ground_truth": "\\frac{1}{2}"}
    good = math_reward(task, "<think>half</think>The result is $\\boxed{0.5}$.")
    assert (good.reward, good.is_correct) == (1.0, True)
    assert good.info == {"extracted": "0.5", "source": "boxed", "format_ok": True, "reason": "correct"}
    wrong = math_reward(task, "Answer: 0.05")
    assert (wrong.reward, wrong.is_correct, wrong.info["reason"]) == (0.0, False, "wrong")
    assert wrong.info["extracted"] == "0.05" and wrong.info["source"] == "answer_line"
    assert math_reward(task, "I don't know").info["reason"] == "no_answer"
    unclosed = math_reward(task, "<think>it is \\boxed{1/2}")
    assert (unclosed.reward, unclosed.info["reason"], unclosed.info["extracted"]) == (
        0.0,
        "unclosed_think",
        None,
    )
    assert math_reward(task, "\\boxed{" + "1+" * 600 + "1}").info["reason"] == "too_long"
    assert get_reward("math") is math_reward


@pytest.mark.parametrize(
    ("truth", "response", "correct"),
    [
        (72, "#### 72", True),
        (0.25, "\\boxed{\\frac14}", True),
        (1e-07, "\\boxed{10^{-7}}", True),
        (["1/2", "\\frac{\\sqrt2}{2}"], "\\boxed{\\frac{1}{\\sqrt2}}", True),  # any one of a list
        (["1/2", "3"], "\\boxed{2}", False),
        ("\\boxed{5}", "Answer: 5", True),  # a reference still in its box
        (["", "42"], "\\boxed{42}", True),  # empty entries of a list are skipped, the rest graded
        (["  ", "42"], "\\boxed{7}", False),
    ],
)
def test_math_reward_ground_truth_forms(truth: object, response: str, correct: bool) -> None:
    assert math_reward({"task_id": "t", "ground_truth": truth}, response).is_correct is correct


@pytest.mark.parametrize(
    "truth", [None, "", "  ", [], ["", " "], True, float("nan"), {"a": 1}, [None, {"a": 1}]]
)
def test_malformed_task_names_the_task(truth: object) -> None:
    task = {"task_id": "gsm8k-17", "ground_truth": truth}
    # What the dataset registry refuses a row for, and what the reward raises on, naming the task.
    assert "holds no usable answer" in ground_truth_problem(task)
    with pytest.raises(ValueError, match="'gsm8k-17'"):
        math_reward(task, "\\boxed{1}")
    with pytest.raises(ValueError, match="'gsm8k-18'"):
        math_reward({"task_id": "gsm8k-18"}, "\\boxed{1}")


@pytest.mark.parametrize(
    ("truth", "usable"),
    [
        ("42", ("42",)),
        (["", "42"], ("42",)),
        (["  ", 3, "x"], ("3", "x")),
        (2.5, ("2.5",)),
        (["", None], ()),
    ],
)
def test_usable_ground_truths_are_the_non_empty_answers(truth: object, usable: tuple[str, ...]) -> None:
    assert usable_ground_truths(truth) == usable
    assert (ground_truth_problem({"ground_truth": truth}) is None) is bool(usable)


def test_format_reward_and_require_boxed() -> None:
    task = {"task_id": "t", "ground_truth": "3"}
    shaped = make_math_reward(format_reward=0.1)
    assert shaped(task, "<think>1+2</think>\\boxed{3}").reward == 1.0
    wrong = shaped(task, "<think>1+2</think>\\boxed{4}")  # well formed, wrong
    assert (wrong.reward, wrong.is_correct, wrong.info["format_ok"]) == (0.1, False, True)
    assert shaped(task, "Answer: 3").reward == 1.0  # right, not boxed
    assert shaped(task, "Answer: 4").reward == 0.0
    assert shaped(task, "<think>\\boxed{3}").reward == 0.0  # unclosed think: nothing
    strict = make_math_reward(require_boxed=True)
    unboxed = strict(task, "Answer: 3")
    assert (unboxed.reward, unboxed.is_correct, unboxed.info["reason"]) == (0.0, False, "not_boxed")
    assert strict(task, "\\boxed{3}").reward == 1.0
    with pytest.raises(ValueError, match="format_reward"):
        make_math_reward(format_reward=1.0)
    with pytest.raises(ValueError, match="timeout_s"):
        make_math_reward(timeout_s=0)


# Inputs whose evaluation would take minutes or exhaust memory.
PATHOLOGICAL = ["2^{2^{2^{2^{2^{100}}}}}", "(10^{10})!", "9^{9^{9}}"]


@pytest.mark.parametrize("prediction", PATHOLOGICAL)
def test_timeout_on_main_thread(prediction: str) -> None:
    start = time.monotonic()
    assert not grade_answer(prediction, "5", timeout_s=0.5)
    assert time.monotonic() - start < 1.5


def test_timeout_reason_and_callers_alarm_kept() -> None:
    if not hasattr(signal, "setitimer"):
        pytest.skip("no interval timers on this platform")
    signal.setitimer(signal.ITIMER_REAL, 100.0)
    try:
        result = make_math_reward(timeout_s=0.3)({"task_id": "t", "ground_truth": "5"}, "\\boxed{(10^{10})!}")
        remaining, _ = signal.getitimer(signal.ITIMER_REAL)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    assert (result.reward, result.info["reason"]) == (0.0, "timeout")
    assert 95.0 < remaining < 100.0  # the caller's alarm survives, less the time spent
    assert grade_answer("1/2", "0.5")  # and nothing is left armed


def test_worker_threads_are_bounded_and_correct() -> None:
    with ThreadPoolExecutor(max_workers=2) as pool:
        assert pool.submit(grade_answer, "\\frac12", "0.5").result()  # starts a worker process (not timed)
        start = time.monotonic()
        assert not pool.submit(grade_answer, PATHOLOGICAL[0], "5", timeout_s=0.5).result()
        assert time.monotonic() - start < 0.5 + _bounded._KILL_GRACE_S + 1.0
        idle = [worker for worker_pool in _bounded._pools.values() for worker in worker_pool._idle]
        for worker in idle:  # a worker that dies while idle is replaced
            worker.proc.kill()
            worker.proc.wait()
        assert pool.submit(grade_answer, "0.25", "1/4").result()
        cases = [*EQUIVALENT[:10], *NOT_EQUIVALENT[:10]]
        verdicts = list(pool.map(lambda case: grade_answer(*case), cases))
    assert verdicts == [True] * 10 + [False] * 10


def test_from_asyncio() -> None:
    async def score() -> list[float]:
        task = {"task_id": "t", "ground_truth": "(x+1)^2"}
        results = await asyncio.gather(
            asyncio.to_thread(math_reward, task, "\\boxed{x^2+2x+1}"),
            asyncio.to_thread(math_reward, task, "\\boxed{x^2+1}"),
        )
        return [math_reward(task, "\\boxed{(1+x)^2}").reward] + [result.reward for result in results]

    assert asyncio.run(score()) == [1.0, 1.0, 0.0]


HANGING_WORKER = "import sys, time; print('ready', flush=True); sys.stdin.readline(); time.sleep(60)"
DYING_WORKER = "import sys; print('ready', flush=True); sys.stdin.readline(); sys.exit(3)"


def test_a_hung_worker_is_killed() -> None:
    """A worker stuck where its own alarm cannot reach (C code) is killed at the deadline plus grace."""
    pool = _bounded._WorkerPool(1, [sys.executable, "-c", HANGING_WORKER])
    start = time.monotonic()
    with pytest.raises(TimeoutError):
        pool.call(["1", ["1"]], timeout_s=0.3)
    assert time.monotonic() - start < 0.3 + _bounded._KILL_GRACE_S + 1.0
    assert pool._idle == []  # killed, not reused
    dying = _bounded._WorkerPool(1, [sys.executable, "-c", DYING_WORKER])
    with pytest.raises(_bounded.WorkerFailed, match="exited"):
        dying.call(["1", ["1"]], timeout_s=1.0)
    broken = _bounded._WorkerPool(1, [sys.executable, "-c", "raise SystemExit(1)"])
    with pytest.raises(_bounded.WorkerFailed):
        broken.call(["1", ["1"]], timeout_s=1.0)
