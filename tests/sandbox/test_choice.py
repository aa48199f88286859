"""Which isolation ``auto`` picks, and what happens without bubblewrap: never a silent fallback.

These tests run on every machine (none of them skips): with bubblewrap installed ``auto`` must be it; without,
the sandbox, the code reward, the python tool and ``rllm train``'s start-up checks refuse with the one line
that says how to install it or opt out knowingly, and the sandbox suites fail under ``CI=true``.
"""

from __future__ import annotations

import functools
import os
import shutil
import time
from collections.abc import Iterator

import pytest
from sandbox_support import require_bubblewrap

from rllm.rewards import code
from rllm.rewards.code import make_code_reward
from rllm.sandbox import SandboxUnavailable, _isolation, protections, run_python
from rllm.tools.builtin import make_python_tool

_TASK = {
    "task_id": "add",
    "ground_truth": {"tests": [{"type": "call", "args": [2, 3], "expected": 5}], "entry_point": "add"},
}


@pytest.fixture
def no_bwrap(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This machine as one without bubblewrap: ``bwrap`` is not found, and no plan is cached."""
    real_which = shutil.which
    monkeypatch.setattr(_isolation, "_PLANS", {})
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None if name == "bwrap" else real_which(name))
    monkeypatch.delenv(_isolation.OPT_IN_ENV, raising=False)
    # The default code reward afresh (an earlier test may have built it with bubblewrap); restored after.
    monkeypatch.setattr(code, "_default", functools.cache(code._default.__wrapped__))
    yield


def test_auto_is_bubblewrap_whenever_bwrap_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(_isolation.OPT_IN_ENV, raising=False)
    if shutil.which("bwrap") is None:
        with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
            protections()
        return
    # Installed: it must work and be chosen (a bwrap that cannot run here is a failure, not a fallback).
    assert protections()["isolation"] == "bwrap"
    assert run_python("print('hi')").protections["isolation"] == "bwrap"


def test_without_bubblewrap_auto_refuses_with_one_line_that_says_what_to_do(no_bwrap: None) -> None:
    with pytest.raises(SandboxUnavailable) as caught:
        protections()
    message = str(caught.value)
    assert "\n" not in message
    assert "apt-get install bubblewrap" in message and "bash scripts/setup.sh" in message
    assert "RLLM_SANDBOX_ISOLATION=none" in message and "isolation='none'" in message
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
        run_python("print('never runs')")


def test_without_bubblewrap_the_code_reward_and_the_python_tool_refuse_when_made(no_bwrap: None) -> None:
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
        make_code_reward()
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
        make_python_tool()


def test_opting_in_to_none_knowingly_grades_and_the_metrics_say_so(
    no_bwrap: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    explicit = make_code_reward(isolation="none", timeout_s=5)(
        _TASK, "```python\ndef add(a, b):\n    return a + b\n```"
    )
    assert explicit.reward == 1.0 and explicit.info["isolation"] == "none"
    assert explicit.metrics == {"reward/code/isolation/none": 1.0}
    assert "ALL readable" in explicit.info["protections"]["filesystem"]
    monkeypatch.setenv(
        _isolation.OPT_IN_ENV, "none"
    )  # the same opt-in for auto, for configs without the argument
    assert make_code_reward()(_TASK, "```python\ndef add(a, b):\n    return 0\n```").metrics == {
        "reward/code/isolation/none": 1.0
    }
    monkeypatch.setenv(_isolation.OPT_IN_ENV, "docker")
    with pytest.raises(ValueError, match="RLLM_SANDBOX_ISOLATION='docker': choose one of"):
        protections()


def test_bubblewrap_grading_is_recorded_in_the_step_metrics() -> None:
    require_bubblewrap()
    result = make_code_reward()(_TASK, "```python\ndef add(a, b):\n    return a + b\n```")
    assert result.reward == 1.0 and result.metrics == {"reward/code/isolation/bwrap": 1.0}


def test_a_training_config_that_grades_code_is_refused_at_start_up(no_bwrap: None) -> None:
    from rllm.trainer.backends.base import UnsupportedConfigError
    from rllm.trainer.backends.local import LocalBackend
    from rllm.trainer.checks import check_config
    from rllm.trainer.config import TrainConfig

    cfg = TrainConfig.model_validate({"data": {"task": "code_problems"}})
    with pytest.raises(UnsupportedConfigError, match="apt-get install bubblewrap"):
        check_config(cfg, LocalBackend.capabilities)


@pytest.mark.parametrize(("ci", "outcome"), [("true", pytest.fail.Exception), ("", pytest.skip.Exception)])
def test_a_missing_sandbox_fails_the_suite_under_ci_and_skips_elsewhere(
    no_bwrap: None, monkeypatch: pytest.MonkeyPatch, ci: str, outcome: type[BaseException]
) -> None:
    monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome, match="apt-get install bubblewrap"):
        require_bubblewrap()


def test_none_says_plainly_that_a_setsid_child_outlives_the_timeout() -> None:
    """Under ``none`` without a leased uid only the process group is killed: a child that calls setsid()
    survives. protections() says so, and this shows it is true (then kills the survivor itself)."""
    described = protections("none")
    if "leased uid" in described["process_tree"]:
        pytest.skip("rllm runs as root and a leased uid can run this interpreter: the uid sweep kills it")
    assert "OUTLIVES the timeout" in described["process_tree"]
    code = (
        "import os, time\n"
        "if os.fork() == 0:\n    os.setsid()\n    print(os.getpid(), flush=True)\n    time.sleep(30)\n"
        "time.sleep(30)\n"
    )
    result = run_python(code, isolation="none", timeout_s=1.0)
    survivor = int(result.stdout.split()[0])
    try:
        time.sleep(0.2)
        os.kill(survivor, 0)  # still alive after the timeout kill
    finally:
        os.kill(survivor, 9)
