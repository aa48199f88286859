"""Fault 5 of the suite: a vLLM server SIGKILLed while both servers decode (tests/vllm_pool's approach, as a
counted scenario): every call it cut is re-routed, none lost, none recorded twice. The vllm tier runs it
(``pytest -m vllm tests/faults``); without a vLLM venv it skips, and fails under CI=true."""

from __future__ import annotations

from pathlib import Path

import _faults
import pytest

from rllm.models import resolve_model

pytestmark = pytest.mark.vllm


def test_a_vllm_server_killed_mid_step_loses_nothing(tmp_path: Path) -> None:
    row = _faults.vllm_killed(tmp_path, resolve_model("smollm2-135m"))
    print("\n" + row.line())
    assert row.injected >= 1 and row.failed == 0, row.line()
    assert row.lost == 0 and row.duplicated == 0, row.line()
    assert row.retried >= row.injected, row.line()
