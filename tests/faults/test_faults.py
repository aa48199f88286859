"""The fault-injection suite (issue 22 item 6): each fault is real (a raising agent, real HTTP servers that
answer 500 or accept a call and never answer, a tool that raises and a tool process SIGKILLed, a gateway
process whose file writes fail, a SIGKILLed trainer, all of 1-4 in one training run), injected into real rllm
code, and counted from the durable records: nothing acknowledged is lost, nothing is recorded twice, every
failure is recorded with its reason. benchmarks/_faults.py has the scenarios; tests/faults/test_vllm_killed.py
the vLLM one."""

from __future__ import annotations

import asyncio
from pathlib import Path

import _faults
import pytest
from _fault_servers import FAKE_MODEL, FlakyServer

from rllm.gateway.http_upstream import HTTPUpstream
from rllm.gateway.upstreams import UpstreamError, UpstreamRequest
from rllm.inference.base import SamplingParams

# Real servers, processes and training runs: the slow tier (CI runs it, and bench_faults.py --quick runs the
# same scenarios in the benchmarks tier), so the fast tier stays within its few minutes.
pytestmark = pytest.mark.slow


def _sound(row: _faults.FaultRow) -> None:
    assert row.injected > 0, row.line()
    assert row.lost == 0 and row.duplicated == 0, row.line()
    assert sum(row.reasons.values()) == row.failed or row.failed == 0, row.line()


def test_agent_code_that_raises_is_retried_and_recorded(tmp_path: Path) -> None:
    row = _faults.agent_raises(tmp_path)
    _sound(row)
    # Every raising attempt was retried (rollout retries=1) or is recorded as failed with the agent's error.
    assert row.retried + row.failed >= row.injected > 0
    assert all("injected agent fault" in reason for reason in row.reasons), row.reasons


def test_upstream_5xx_is_retried_by_the_gateway(tmp_path: Path) -> None:
    row = _faults.upstream_5xx(tmp_path)
    _sound(row)
    assert row.failed == 0 and row.retried >= row.injected, row.line()


def test_hung_upstream_calls_time_out_and_are_retried(tmp_path: Path) -> None:
    row = _faults.upstream_hangs(tmp_path, tasks=10, timeout_s=0.5)
    _sound(row)
    assert row.failed == 0 and row.retried >= row.injected, row.line()


def test_crashing_tools_are_results_not_crashed_episodes(tmp_path: Path) -> None:
    row = _faults.tools_crash(tmp_path, tasks=5)
    _sound(row)
    assert row.failed == row.injected, row.line()
    assert any("lookup raised ValueError" in r for r in row.reasons)
    assert any("Exit code -9" in r for r in row.reasons)


def test_a_trace_store_that_cannot_write_answers_503_and_keeps_what_it_had(tmp_path: Path) -> None:
    row = _faults.store_write_fails(tmp_path, calls=12)
    _sound(row)
    assert row.failed == row.injected, row.line()
    assert all(r.startswith("503: the gateway's trace store") for r in row.reasons), row.reasons


def test_one_upstream_server_retries_its_own_5xx() -> None:
    """A one-server upstream used to fail a call at its first 500 although retries=2 (no other worker)."""

    async def run(url: str) -> tuple[int, int]:
        upstream = HTTPUpstream([url], kind="vllm", model=FAKE_MODEL, retries=2)
        request = UpstreamRequest(
            endpoint="chat.completions", messages=[{"role": "user", "content": "hi"}], params=SamplingParams()
        )
        try:
            for i in range(4):
                await upstream.complete(request, session_id=f"s{i}")
            return upstream.retried, upstream.rerouted
        finally:
            await upstream.aclose()

    with FlakyServer(error_every=2) as server:  # every 2nd call answers 500
        retried, rerouted = asyncio.run(run(server.url))
    assert server.errors >= 2 and retried == server.errors and rerouted == 0


@pytest.mark.parametrize("bad", [{"timeout_s": 0}, {"timeout_s": float("nan")}, {"retries": -1}])
def test_bad_upstream_timeout_or_retries_is_refused(bad: dict) -> None:
    with pytest.raises(ValueError, match="timeout|retries"):
        HTTPUpstream(["http://127.0.0.1:1"], **bad)


def test_the_upstream_call_timeout_is_config() -> None:
    from rllm.trainer.config import TrainConfig
    from rllm.utils.config import load_config

    vllm = ["inference.engine=vllm"]
    assert load_config(TrainConfig, None, vllm).inference.vllm.call_timeout_s == 600.0
    for bad in ("0", "-1", "inf"):
        with pytest.raises(Exception, match="call_timeout_s"):
            load_config(TrainConfig, None, [*vllm, f"inference.vllm.call_timeout_s={bad}"])


def test_no_upstream_answer_is_an_upstream_error() -> None:
    """Every retry hangs: the call fails with a 502 that names the time-out, after retries+1 attempts."""

    async def run(url: str) -> str:
        upstream = HTTPUpstream([url], kind="vllm", model=FAKE_MODEL, retries=1, timeout_s=0.3)
        request = UpstreamRequest(
            endpoint="chat.completions", messages=[{"role": "user", "content": "hi"}], params=SamplingParams()
        )
        try:
            with pytest.raises(UpstreamError) as err:
                await upstream.complete(request, session_id="s")
            return str(err.value)
        finally:
            await upstream.aclose()

    with FlakyServer(hang_every=1) as server:
        message = asyncio.run(run(server.url))
    assert server.hangs == 2 and "TimeoutError" in message


def test_a_sigkilled_trainer_resumes_with_no_step_lost_or_logged_twice(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    row = _faults.trainer_killed(tmp_path, tiny_model_dir)
    _sound(row)
    assert row.retried >= 1, row.line()


def test_a_training_run_under_faults_1_to_4_completes_with_nothing_lost(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    row, _ = _faults.all_faults_training(
        tmp_path, _faults.tiny_overrides(tiny_model_dir), steps=3, upstream_timeout_s=3.0, timeout_s=300
    )
    _sound(row)
    assert "upstream_500" in row.note and row.retried > 0, row.line()
