"""What the benchmark scripts print: the header line (date, commit, command, machine), the gateway's
per-concurrency targets (never one concurrency's latency beside another's throughput), and the GRPO
benchmark's one reward function. The scripts themselves run end to end in CI's `benchmarks --quick` tier."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import _common
import bench_gateway

from rllm.rewards.basic import number_reward


def test_header_line_names_date_commit_command_and_machine() -> None:
    line = _common.header_line()
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert re.search(r"measured \d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC", line), line
    assert re.search(rf"at commit {head}(-dirty)? with `", line), line
    assert f"with `{shlex.join(sys.orig_argv)}`;" in line  # the exact command line
    assert re.search(r"\d+ logical CPUs, \d+\.\d GiB RAM, torch \S+", line), line
    assert _common.cpu_model() in line


@pytest.mark.parametrize(
    ("reply", "expected"), [("52", 1.0), ("The larger number is 52.", 1.0), ("37 or 52", 0.0), ("none", 0.0)]
)
def test_grpo_reward_is_rllms_number_reward(reply: str, expected: float) -> None:
    task = {"task_id": "t", "question": "Which is larger, 37 or 52?", "ground_truth": "52"}
    assert _common.grpo_reward(task, reply) == expected == number_reward(task, reply).reward


def _point(rps: float, p50: float, p99: float) -> dict:
    return {
        "requests_per_s": rps,
        "p50_ms": p50,
        "p99_ms": p99,
        "errors_total": 0,
        "cpu_cores": {"loadgen": 0.1, "upstream": 0.1, "gateway": 0.9, "litellm": 0.9},
        "cpu_ms_per_request": {"gateway": 0.5, "litellm": 10.0},
    }


def _results() -> dict:
    off, on = bench_gateway.gateway_path(False), bench_gateway.gateway_path(True)
    points = {
        "1": {"direct": _point(20000, 0.05, 0.1), off: _point(1000, 0.85, 3.0), on: _point(600, 1.60, 4.0)},
        "64": {
            "direct": _point(80000, 0.70, 2.0),
            off: _point(1700, 35.0, 80.0),
            on: _point(650, 90.0, 150.0),
        },
        "256": {
            "direct": _point(70000, 3.0, 8.0),
            off: _point(1600, 200.0, 370.0),
            on: _point(700, 360.0, 500.0),
        },
    }
    return {"concurrency": [1, 64, 256], "paths": ["direct", off, on], "points": points}


def test_gateway_targets_are_judged_per_concurrency() -> None:
    points = _results()["points"]
    at1 = "\n".join(bench_gateway.target_lines(1, points["1"]))
    assert "(fsync off): added p50 +0.80 ms at 1 session (target <= 1 ms): PASS" in at1
    assert "(fsync on): added p50 +1.55 ms at 1 session (target <= 1 ms): FAIL" in at1
    assert "req/s" not in at1
    assert bench_gateway.target_lines(64, points["64"]) == ["- no target is set at 64 session(s)"]
    at256 = bench_gateway.target_lines(256, points["256"])
    durable = next(line for line in at256 if "(fsync on)" in line)
    assert "700 req/s at 256 sessions" in durable and "the durable row: the target" in durable
    assert durable.endswith("FAIL")
    reference = next(line for line in at256 if "(fsync off)" in line)
    assert "not power-loss durable" in reference and reference.endswith("PASS")
    assert not any("added p50" in line for line in at256)


def test_gateway_report_has_one_table_per_concurrency_with_its_own_numbers() -> None:
    text = bench_gateway.report(_results())
    sections = re.split(r"\n\*\*(\d+) concurrent session\(s\)\*\*\n", text)[1:]
    tables = dict(zip(sections[::2], sections[1::2], strict=True))
    assert list(tables) == ["1", "64", "256"]
    # added p50 at 64 = 35.0 - 0.70 (64's own direct row), never 1-session latency beside 64's req/s.
    row64 = next(line for line in tables["64"].splitlines() if "(fsync off)" in line)
    cells = [c.strip() for c in row64.split("|")[1:-1]]
    assert cells[2:6] == ["1700", "35.00", "80.00", "34.30"], cells
    assert "targets at 64 session(s):" in tables["64"] and "targets at 1 session(s)" not in tables["64"]


def _grpo_result(generated_tokens: float, step_s: float) -> dict[str, object]:
    """A worker's result as bench_grpo_vs_trl.py's report reads it, one timed step."""
    phase = {
        "generate_s": step_s / 2,
        "train_s": step_s / 2,
        "other_s": 0.0,
        "sync_s": 0.0,
        "decode_steps": 32,
        "decode_batches": 1,
        "generated_tokens": generated_tokens,
    }
    return {
        "step_s": [step_s],
        "warmup_s": [step_s],
        "peak_rss_mb": 1.0,
        "rss_peak_steps_mb": 1.0,
        "rss_loaded_mb": 1.0,
        "completion_len_mean": [generated_tokens / 8],
        "threads": 2,
        "phases": [phase],
        "precision_seen": [],
        "attention": "eager",
        "trainable_params": 1,
        "trl_version": "0",
    }


@pytest.mark.parametrize(
    ("trl_tokens", "expected"),
    [
        (256, "**Like for like (fp32 on both sides, equal generated tokens): rllm 6.00 s vs TRL 10.00 s"),
        (216, "fp32 on both sides, NOT like for like: rllm generated 256 tokens per step, TRL 216"),
    ],
)
def test_grpo_ratio_is_like_for_like_only_on_equal_generated_tokens(
    trl_tokens: int, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import argparse

    import _grpo_report

    args = argparse.Namespace(
        model="m", prompts=2, generations=4, max_tokens=32, full_length=True, full_finetune=False,
        lora_rank=32, lora_alpha=64, micro_batch=16, steps=1, warmup=1,
    )  # fmt: skip
    results = {("rllm", "fp32"): _grpo_result(256, 6.0), ("trl", "fp32"): _grpo_result(trl_tokens, 10.0)}
    _grpo_report.print_report(args, results, ["fp32"])
    out = capsys.readouterr().out
    assert expected in out
    assert ("Like for like" in out) == (trl_tokens == 256)
