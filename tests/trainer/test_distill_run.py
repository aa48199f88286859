"""On-policy distillation through AgentTrainer (algorithm.distill): a local teacher scores the student's
sampled tokens, the advantage is -coef x the per-token reverse KL, and the KL falls as the student learns;
the start-up refusals, one line each."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import torch
from test_learning import TASKS, learning_overrides, make_tiny_vocab_model
from transformers import AutoModelForCausalLM, AutoTokenizer

from rllm.gateway.app import create_app
from rllm.gateway.server import GatewayServer
from rllm.gateway.traces import TraceStore
from rllm.inference.local import LocalEngine
from rllm.runner.context import RolloutContext
from rllm.trainer.agent_trainer import AgentTrainer
from rllm.trainer.backends.base import UnsupportedConfigError
from rllm.trainer.config import TrainConfig
from rllm.trainer.distill import RemoteTeacher, TeacherEndpointError
from rllm.trainer.replay import ReplayError, open_run, replay_step
from rllm.utils.config import load_config

DISTILL = ["algorithm.distill.mode=alone", "algorithm.filters.drop_zero_variance=false"]


async def three_tokens(task: dict, ctx: RolloutContext) -> bool:
    """Three sampled tokens per episode: more for the teacher to score than one."""
    completion = await ctx.complete(task["prompt_ids"], max_tokens=3)
    return completion.completion_ids[:1] == [task["answer_id"]]


def _distill_config(student: Path, run_dir: Path, steps: int, *extra: str) -> TrainConfig:
    return load_config(
        TrainConfig,
        None,
        [
            *learning_overrides(student, run_dir, steps),
            "rollout.batch_size=4",
            "rollout.group_size=4",
            "rollout.max_tokens=3",
            "trainer.name=learn",
            *DISTILL,
            *extra,
        ],
    )


def _sharp_teacher(out_dir: Path) -> Path:
    """Another random init of the student's architecture and vocabulary, with sharpened (peaked) outputs."""
    make_tiny_vocab_model(out_dir, seed=1)
    model = AutoModelForCausalLM.from_pretrained(out_dir, dtype=torch.float32)
    with torch.no_grad():
        model.lm_head.weight.mul_(30.0)
    model.save_pretrained(out_dir)
    return out_dir


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_a_teacher_equal_to_the_student_gives_zero_kl_and_advantage(tmp_path: Path) -> None:
    student = make_tiny_vocab_model(tmp_path / "student")
    cfg = _distill_config(
        student, tmp_path / "runs", 1, f"algorithm.distill.teacher={student}", "eval.after=false"
    )
    trainer = AgentTrainer(cfg, workflow=three_tokens, train_tasks=TASKS, test_tasks=TASKS[:1])
    seen: list = []
    update = trainer._update
    trainer._update = lambda prepared: seen.append(prepared.batch) or update(prepared)  # type: ignore[method-assign]
    trainer.train()
    (record,) = [r for r in _records(trainer.run_dir) if "distill/reverse_kl" in r]
    assert abs(record["distill/reverse_kl"]) < 1e-4
    assert record["distill/teacher_s"] > 0
    advantages = [a for s in seen[0].sequences for a, m in zip(s.advantages, s.loss_mask) if m]
    assert len(advantages) >= 16  # 16 episodes, at least one sampled token each
    assert max(abs(a) for a in advantages) < 1e-4
    with pytest.raises(ReplayError, match="replay does not recompute"):  # the advantages are the teacher's
        replay_step(open_run(trainer.run_dir), 0)


def test_the_student_distills_a_different_teacher_and_the_reverse_kl_falls(tmp_path: Path) -> None:
    student = make_tiny_vocab_model(tmp_path / "student")
    teacher = _sharp_teacher(tmp_path / "teacher")
    cfg = _distill_config(
        student,
        tmp_path / "runs",
        20,
        f"algorithm.distill.teacher={teacher}",
        "optim.lr=0.03",
        "eval.before=false",
        "eval.after=false",
    )
    AgentTrainer(cfg, workflow=three_tokens, train_tasks=TASKS, test_tasks=TASKS).train()
    kl = [r["distill/reverse_kl"] for r in _records(tmp_path / "runs" / "learn") if "distill/reverse_kl" in r]
    print("\nreverse KL by step: " + " ".join(f"{k:.3f}" for k in kl))
    assert len(kl) == 20
    assert kl[0] > 0.5, "two random inits should start far apart"
    assert sum(kl[-3:]) / 3 < 0.5 * sum(kl[:3]) / 3


def test_start_up_refusals(tmp_path: Path, tiny_model_dir: Path) -> None:
    student = make_tiny_vocab_model(tmp_path / "student")
    runs = tmp_path / "runs"
    with pytest.raises(ValueError, match="both set: name one teacher"):
        _distill_config(
            student, runs, 1, f"algorithm.distill.teacher={student}", "algorithm.distill.teacher_url=x"
        )
    with pytest.raises(ValueError, match="set algorithm.filters.drop_zero_variance=false"):
        _distill_config(
            student,
            runs,
            1,
            f"algorithm.distill.teacher={student}",
            "algorithm.filters.drop_zero_variance=true",
        )
    with pytest.raises(ValueError, match="applies to a teacher_url only"):
        _distill_config(
            student, runs, 1, f"algorithm.distill.teacher={student}", "algorithm.distill.teacher_model=m"
        )
    with pytest.raises(ValueError, match="no teacher is"):
        _distill_config(student, runs, 1, "algorithm.distill.coef=2")
    with pytest.raises(UnsupportedConfigError, match="is not a model directory"):
        AgentTrainer(
            _distill_config(student, runs, 1, f"algorithm.distill.teacher={tmp_path}/nope"),
            workflow=three_tokens,
            train_tasks=TASKS,
            test_tasks=TASKS,
        )
    with pytest.raises(UnsupportedConfigError, match="rollout.temperature=1"):
        AgentTrainer(
            _distill_config(
                student, runs, 1, f"algorithm.distill.teacher={student}", "rollout.temperature=0.7"
            ),
            workflow=three_tokens,
            train_tasks=TASKS,
            test_tasks=TASKS,
        )
    # A teacher on another vocabulary (the smollm2 tokenizer vs the student's 16 words): refused at set-up.
    trainer = AgentTrainer(
        _distill_config(student, runs, 1, f"algorithm.distill.teacher={tiny_model_dir}"),
        workflow=three_tokens,
        train_tasks=TASKS,
        test_tasks=TASKS,
    )
    with pytest.raises(UnsupportedConfigError, match="another vocabulary than the student"):
        trainer.train()


def test_an_unreachable_endpoint_is_refused_by_the_probe(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(TeacherEndpointError, match="GET http://127.0.0.1:.*/models failed"):
        RemoteTeacher(f"http://127.0.0.1:{port}/v1", model=None, api_key=None, timeout_s=2, concurrency=1)
    teacher = RemoteTeacher(
        f"http://127.0.0.1:{port}/v1", model="m", api_key=None, timeout_s=2, concurrency=1
    )
    student = make_tiny_vocab_model(tmp_path / "student")
    with pytest.raises(TeacherEndpointError, match="cannot be reached"):
        teacher.check(AutoTokenizer.from_pretrained(student))
    teacher.close()


def test_the_async_loop_distills_too(tmp_path: Path) -> None:
    """With rollout.max_staleness=1 the training thread calls the teacher: every step logs its reverse KL."""
    student = make_tiny_vocab_model(tmp_path / "student")
    teacher = _sharp_teacher(tmp_path / "teacher")
    cfg = _distill_config(
        student,
        tmp_path / "runs",
        3,
        f"algorithm.distill.teacher={teacher}",
        "rollout.max_staleness=1",
        "eval.before=false",
        "eval.after=false",
    )
    AgentTrainer(cfg, workflow=three_tokens, train_tasks=TASKS, test_tasks=TASKS).train()
    records = [r for r in _records(tmp_path / "runs" / "learn") if "time/step_s" in r]
    assert len(records) == 3
    assert all(r["distill/reverse_kl"] > 0.5 and r["distill/teacher_s"] > 0 for r in records)


def test_an_endpoint_without_prompt_logprobs_is_refused_by_the_probe(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """rllm's own gateway (real HTTP on loopback) answers /v1/completions but not prompt_logprobs."""
    engine = LocalEngine.from_pretrained(str(tiny_model_dir), device="cpu", dtype="float32")
    store = TraceStore(tmp_path / "traces.db")
    with GatewayServer(create_app(engine, store, model_name="tiny")) as server:
        teacher = RemoteTeacher(f"{server.url}/v1", model=None, api_key=None, timeout_s=30, concurrency=1)
        assert teacher.model == "tiny"  # GET /v1/models answered
        with pytest.raises(TeacherEndpointError, match="returned no prompt_logprobs"):
            teacher.check(engine.tokenizer)
        teacher.close()
    store.close()
