"""The profiler: a real two-step run writes a torch.profiler trace for the step asked for, and
``rllm profile`` turns its metrics into a report; the report's advice follows the numbers and names only
config keys that exist; MFU counts the model's FLOPs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from run_support import tiny_run_config

from rllm.cli.main import main
from rllm.trainer.agent_trainer import AgentTrainer
from rllm.trainer.backends.base import UnsupportedConfigError
from rllm.trainer.config import TrainConfig
from rllm.trainer.profile_report import advice, load_profile, render
from rllm.trainer.profiler import ModelFlops, collective_metrics, collective_stats, known_peak_tflops
from rllm.types import TrainBatch, TrainSequence
from rllm.utils.config import is_config_key, load_config


def test_a_run_profiles_the_steps_asked_for_and_rllm_profile_reports_it(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tiny_run_config(
        tiny_model_dir,
        tmp_path,
        "profiled",
        "trainer.steps=1",
        "trainer.profile_steps=[1]",
        "rollout.group_size=2",
        "rollout.max_tokens=4",
        "data.train_size=4",
        "trainer.store_enabled=false",
        "algorithm.filters.drop_zero_variance=false",
    )
    run_dir = AgentTrainer(cfg).train().run_dir
    assert sorted(p.name for p in (run_dir / "profile").iterdir()) == ["step_1.json", "step_1.txt"]
    trace = json.loads((run_dir / "profile" / "step_1.json").read_text())
    names = {e.get("name") for e in trace["traceEvents"]}
    assert "aten::mm" in names or "aten::addmm" in names  # the update's matrix products were captured
    assert main(["profile", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^rollout\s+\d+\.\d+\s+\d+%$", out, re.MULTILINE)
    assert re.search(r"^\s+forward_backward\s+\d+\.\d+\s+\d+%$", out, re.MULTILINE)
    assert "rss_peak_train_gb" in out and "advice:" in out


def test_rllm_profile_refuses_a_directory_without_metrics(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["profile", str(tmp_path)]) == 2
    assert "no metrics.jsonl" in capsys.readouterr().out


def _run(run_dir: Path, steps: list[dict[str, float]], config: dict) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": i + 1, **s}) + "\n" for i, s in enumerate(steps))
    )
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    return run_dir


def _keys_exist(lines: list[str]) -> None:
    quoted = {
        k
        for line in lines
        for k in re.findall(r"\b((?:backend|inference|rollout|lora|eval|data)\.\w+)", line)
    }
    assert quoted and all(is_config_key(TrainConfig, k) for k in quoted), quoted


def test_advice_follows_the_numbers(tmp_path: Path) -> None:
    # Rollout-bound, full fine-tune, 9 GB peak in the update; the first (warm-up) step is left out of the means.
    step = {
        "time/step_s": 10.0,
        "time/data_s": 0.0,
        "time/rollout_s": 7.7,
        "time/train_s": 2.0,
        "time/forward_backward_s": 1.5,
        "time/sync_s": 0.2,
        "perf/rss_peak_gb": 9.0,
        "perf/rss_peak_rollout_gb": 3.0,
        "perf/rss_peak_train_gb": 9.0,
    }
    warmup = {**step, "time/step_s": 100.0}
    config = {"lora": {"enabled": False}, "backend": {"micro_batch_size": 16, "logprob_chunk_tokens": 0}}
    p = load_profile(_run(tmp_path, [warmup, step, step], config))
    assert p.steps == [2, 3] and p.step_s == pytest.approx(10.0)
    assert p.phases["other"] == pytest.approx(0.1)
    lines = advice(p)
    assert lines[0].startswith("rollout is 77 % of the step") and "inference.engine=vllm" in lines[0]
    memory = next(line for line in lines if line.startswith("peak RSS"))
    assert "in the update" in memory and "backend.logprob_chunk_tokens=1024" in memory and "now 16" in memory
    assert "backend.micro_batch_tokens (now 2048)" in memory  # the config's default when it does not say
    _keys_exist(lines)
    assert "forward_backward" in render(p)


def test_a_step_without_an_update_counts_as_zero_in_the_update_parts(tmp_path: Path) -> None:
    # Every group filtered out: the step has a short train phase and no forward_backward at all. The parts
    # must average over the same steps as their phase, or they read larger than it.
    updated = {
        "time/step_s": 10.0,
        "time/rollout_s": 5.0,
        "time/train_s": 4.0,
        "time/forward_backward_s": 3.9,
    }
    skipped = {"time/step_s": 5.0, "time/rollout_s": 5.0, "time/train_s": 0.0}
    p = load_profile(_run(tmp_path, [updated, updated, skipped], {}))
    assert p.phases["train"] == pytest.approx(2.0)
    assert p.train_parts["forward_backward"] == pytest.approx(1.95)


def test_advice_for_an_update_bound_run_and_a_quiet_one(tmp_path: Path) -> None:
    step = {"time/step_s": 10.0, "time/rollout_s": 2.0, "time/train_s": 7.5, "time/old_logprobs_s": 2.5}
    config = {"lora": {"enabled": False}, "backend": {"old_logprobs": "recompute", "device": "cpu"}}
    lines = advice(load_profile(_run(tmp_path / "a", [step], config)))
    assert lines[0].startswith("the update is 75 % of the step")
    assert "lora.enabled=true" in lines[0] and "backend.old_logprobs=rollout" in lines[0]
    _keys_exist(lines)
    balanced = {"time/step_s": 10.0, "time/rollout_s": 4.5, "time/train_s": 4.5, "perf/rss_peak_gb": 1.0}
    assert advice(load_profile(_run(tmp_path / "b", [balanced], {})))[0].startswith("no phase stands out")


def test_collective_stats_on_gloo_and_nccl_events() -> None:
    ms = 1_000_000
    # gloo (as torch.profiler records it): the op on its worker thread (7); the rank's thread (1) issues it and
    # computes (aten::*) for part of its flight, then waits in Work.wait(), which records nothing. An aten op
    # on gloo's own thread is not the rank's compute.
    gloo = [
        ("c10d::_allgather_base_", False, 1, 0, 1 * ms),
        ("gloo:all_gather", False, 7, 1 * ms, 11 * ms),
        ("aten::mm", False, 1, 2 * ms, 5 * ms),  # overlaps 3 ms of the all-gather
        ("aten::div_", False, 7, 10 * ms, 11 * ms),
        ("gloo:all_reduce", False, 8, 10 * ms, 14 * ms),  # overlaps the all-gather's last ms
        ("aten::add", False, 1, 20 * ms, 30 * ms),  # no collective in flight
    ]
    out = collective_stats(gloo)
    assert out["count"] == 2
    assert out["collective_s"] == pytest.approx(0.013)  # 1..14 ms
    assert out["exposed_s"] == pytest.approx(0.010)  # minus the 3 ms of aten::mm
    # NCCL: kernels on the GPU; host events (the enqueue) are not the collective's time.
    nccl = [
        ("nccl:all_gather", False, 1, 0, ms // 10),
        ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", True, 9, 0, 4 * ms),
        ("ampere_sgemm_128x64_nn", True, 8, 1 * ms, 3 * ms),  # compute on another stream: overlapped
        ("ncclKernel_ReduceScatter_RING_LL_Sum_float", True, 9, 6 * ms, 8 * ms),
    ]
    out = collective_stats(nccl)
    assert out == {"collective_s": pytest.approx(0.006), "exposed_s": pytest.approx(0.004), "count": 2.0}
    # the step's metrics: means over ranks, the slowest rank, exposed over the ranks' working time
    ranks = [
        {"collective_s": 1.0, "exposed_s": 0.5, "count": 10.0, "busy_s": 4.0, "overhead_s": 0.1},
        {"collective_s": 3.0, "exposed_s": 1.5, "count": 10.0, "busy_s": 4.0, "overhead_s": 0.1},
    ]
    m = collective_metrics(ranks)
    assert m["profile/collective_s"] == 2.0 and m["profile/collective_max_s"] == 3.0
    assert m["profile/collective_frac"] == pytest.approx(0.25) and m["profile/collectives"] == 10.0
    assert collective_metrics([]) == {}


def test_advice_when_the_ranks_wait_on_collectives(tmp_path: Path) -> None:
    step = {
        "time/step_s": 10.0,
        "time/rollout_s": 4.0,
        "time/train_s": 4.5,
        "profile/collective_s": 2.0,
        "profile/collective_exposed_s": 1.8,
        "profile/collective_frac": 0.4,
        "profile/rank_busy_s": 4.5,
        "profile/collectives": 240.0,
    }
    config = {
        "backend": {"micro_batch_size": 2, "distributed": {"world_size": 4}},
        "rollout": {"batch_size": 8},
    }
    p = load_profile(_run(tmp_path / "a", [step], config))
    lines = advice(p)
    assert lines[0].startswith("the ranks wait on collectives 40 % of their working time (1.80 of 4.50 s")
    for key in ("backend.micro_batch_size (now 2)", "world_size, now 4", "reshard_after_forward=false"):
        assert key in lines[0]
    _keys_exist(lines)
    text = render(p)
    assert "collectives (distributed ranks" in text and "40.0 %" in text
    quiet = {**step, "profile/collective_frac": 0.1}
    assert not any(
        "collectives" in line for line in advice(load_profile(_run(tmp_path / "b", [quiet], config)))
    )
    assert "collectives" not in render(load_profile(_run(tmp_path / "c", [{"time/step_s": 1.0}], {})))


def test_model_flops_count_six_per_parameter_and_token(tiny_model_dir: Path) -> None:
    flops = ModelFlops(str(tiny_model_dir))
    row = TrainSequence(
        input_ids=[1, 2, 3, 4], loss_mask=[0, 0, 1, 1], rollout_logprobs=[0.0] * 4, advantages=[0.0] * 4
    )
    batch = TrainBatch(sequences=[row])
    T = 4
    expected = T * (6 * flops.body_params + 12 * flops.layers * flops.hidden * T) + 6 * flops.head_params * 2
    assert flops.update_flops(batch) == pytest.approx(expected)
    assert flops.update_flops(batch, forward_passes=1) == pytest.approx(expected * 4 / 3)
    assert known_peak_tflops("NVIDIA H100 80GB HBM3") == 989.0
    assert known_peak_tflops("NVIDIA L40S") == 362.0 and known_peak_tflops("NVIDIA L4") == 121.0
    assert known_peak_tflops("NVIDIA A100-SXM4-80GB") == 312.0 and known_peak_tflops("Some Card") is None


def test_profile_steps_must_be_steps_of_the_run() -> None:
    from rllm.utils.config import ConfigError

    with pytest.raises(ConfigError, match="trainer.profile_steps"):
        load_config(TrainConfig, None, ["trainer.steps=2", "trainer.profile_steps=[3]"])
    with pytest.raises(ConfigError, match="count from 1"):
        load_config(TrainConfig, None, ["trainer.steps=2", "trainer.profile_steps=[0]"])
    assert load_config(
        TrainConfig, None, ["trainer.steps=2", "trainer.profile_steps=[1,2]"]
    ).trainer.profile_steps == [1, 2]


def test_the_tinker_backend_refuses_logprob_chunk_tokens() -> None:
    from rllm.trainer.backends import backend_capabilities
    from rllm.trainer.checks import check_config

    cfg = load_config(TrainConfig, None, ["backend.name=tinker", "backend.logprob_chunk_tokens=256"])
    with pytest.raises(UnsupportedConfigError, match="logprob_chunk_tokens"):
        check_config(cfg, backend_capabilities("tinker"))
