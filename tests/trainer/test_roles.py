"""Separate weights per role, outside the backend: the ``roles`` section, the start-up refusals, and the
workflow runner naming each call's adapter from its role. The end-to-end run (solver-judge, an adapter per
role, through AgentTrainer) needs an engine that samples per adapter: it runs once the local engine can."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from rllm.gateway.app import create_app
from rllm.gateway.server import GatewayServer
from rllm.gateway.traces import TraceStore
from rllm.gateway.upstreams import LocalUpstream
from rllm.inference.base import EngineCapabilities, SamplingParams
from rllm.inference.local import LocalEngine
from rllm.runner.workflow_runner import WorkflowRunner
from rllm.trainer import checks
from rllm.trainer.backends import backend_capabilities
from rllm.trainer.backends.base import UnsupportedConfigError
from rllm.trainer.config import TrainConfig, adapter_lrs, adapter_names
from rllm.utils.config import ConfigError, describe_config, load_config
from rllm.workflows.single_turn import SingleTurnWorkflow
from rllm.workflows.solver_judge import SolverJudgeWorkflow

ROLES = ["roles.solver.adapter=solver", "roles.judge.adapter=judge"]


def _cfg(*overrides: str) -> TrainConfig:
    return load_config(TrainConfig, None, list(overrides))


def _refusal(cfg: TrainConfig) -> str:
    with pytest.raises(UnsupportedConfigError) as info:
        checks.check_config(cfg, backend_capabilities(cfg.backend.name))
    return str(info.value)


def test_the_roles_section() -> None:
    cfg = _cfg(*ROLES, "roles.critic.adapter=judge", "roles.judge.lr=0.01")
    assert adapter_names(cfg.roles) == ["default", "solver", "judge"]  # a shared adapter once
    assert adapter_lrs(cfg.roles, cfg.optim.lr) == {"default": 5e-4, "solver": 5e-4, "judge": 0.01}
    assert adapter_names(_cfg().roles) == []
    with pytest.raises(ConfigError, match="must be letters, digits"):
        _cfg("roles.solver.adapter=a.b")
    with pytest.raises(ConfigError, match="two learning rates"):
        _cfg(*ROLES, "roles.solver.adapter=judge", "roles.solver.lr=1", "roles.judge.lr=2")
    with pytest.raises(ConfigError, match="did you mean 'roles.solver.adapter'"):
        _cfg("roles.solver.adaptr=x")
    listed = [line.split()[0] for line in describe_config(TrainConfig).splitlines()]
    assert {"roles", "roles.<role>.adapter", "roles.<role>.lr"} <= set(listed)  # rllm train --help-config


def test_start_up_refuses_what_cannot_train_an_adapter_per_role(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "set lora.enabled=true" in _refusal(_cfg(*ROLES, "lora.enabled=false"))
    assert "backend 'tinker' trains one set of weights" in _refusal(_cfg(*ROLES, "backend.name=tinker"))
    # Which engines serve adapters changes as they learn to: the check reads the capability, so fix it here.
    one_policy = EngineCapabilities(name="one", weight_transfer="tensors")
    monkeypatch.setattr(checks, "engine_capabilities", lambda name: one_policy)
    assert "cannot sample from a different adapter per call" in _refusal(_cfg(*ROLES))
    # The distributed backend trains an adapter per role on its ranks too (on an engine that serves them).
    serving = one_policy.model_copy(update={"adapters": True})
    monkeypatch.setattr(checks, "engine_capabilities", lambda name: serving)
    # (the roles check alone: the distributed plug-in's own check wants Ray, which the fast tier lacks)
    checks._check_roles(_cfg(*ROLES, "backend.name=distributed"), backend_capabilities("distributed"))
    # An agent flow's calls name their role by session, which only the embedded gateway maps to adapters.
    own_gateways = one_policy.model_copy(update={"adapters": True, "own_gateway": True})
    monkeypatch.setattr(checks, "engine_capabilities", lambda name: own_gateways)
    flow = _cfg(*ROLES, "workflow.name=flow", "workflow.flow=mypkg.flows:solve")
    assert "its own gateways do not pick an adapter per role" in _refusal(flow)


class AdapterIgnoringRecorder:
    """The real local engine, recording the ``adapter=`` each call names and then sampling the base weights
    (no adapters are loaded in these tests): what the runner asks for, not what an adapter would answer."""

    def __init__(self, engine: LocalEngine) -> None:
        self.engine = engine
        self.capabilities = engine.capabilities
        self.calls: list[tuple[list[int], str | None]] = []

    def __getattr__(self, name: str) -> Any:  # tokenizer, weight_version, ...: the engine's own
        return getattr(self.engine, name)

    def apply_chat_template(
        self, messages: list[dict[str, Any]], tools: list[dict] | None = None
    ) -> list[int]:
        return self.engine.apply_chat_template(messages, tools=tools)

    async def generate(self, prompt_ids: list[int], params: SamplingParams, **kwargs: Any) -> list:
        self.calls.append((list(prompt_ids), kwargs.pop("adapter", "<none>")))
        return await self.engine.generate(prompt_ids, params, **kwargs)


def _run(engine: Any, workflow: Any, adapters: dict[str, str] | None) -> list:
    runner = WorkflowRunner(
        workflow, engine, SamplingParams(max_tokens=6, seed=0), show_progress=False, adapters=adapters
    )
    task = {"task_id": "q", "question": "What is 2 + 3?", "ground_truth": "5"}
    return asyncio.run(runner.run_tasks([task], group_size=2))


def test_the_runner_names_each_calls_adapter_by_its_role(tiny_model_dir: Path) -> None:
    engine = AdapterIgnoringRecorder(
        LocalEngine.from_pretrained(str(tiny_model_dir), device="cpu", dtype="float32")
    )
    episodes = _run(engine, SolverJudgeWorkflow(n_solvers=2), {"solver": "s", "judge": "j"})
    role_of = {tuple(s.prompt_ids): t.name for ep in episodes for t in ep.trajectories for s in t.steps}
    assert set(role_of.values()) == {"solver", "judge"}  # a prompt belongs to one role (solvers share one)
    assert len(engine.calls) == 6
    assert all(adapter == {"solver": "s", "judge": "j"}[role_of[tuple(ids)]] for ids, adapter in engine.calls)

    engine.calls.clear()  # a role the mapping does not list samples from the default adapter
    _run(engine, SingleTurnWorkflow(), {"solver": "s"})
    assert [a for _, a in engine.calls] == ["default", "default"]
    engine.calls.clear()  # without roles no call names an adapter (engines without adapters take none)
    _run(engine, SingleTurnWorkflow(), None)
    assert [a for _, a in engine.calls] == ["<none>", "<none>"]


def test_the_embedded_gateway_names_the_adapter_of_each_sessions_role(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    # An @rllm.rollout flow's role calls go to the role's sub-session ({episode}:{role}, the base URL
    # AgentConfig.role_url(role) gives), the episode's own calls to its session: real HTTP on loopback.
    engine = AdapterIgnoringRecorder(
        LocalEngine.from_pretrained(str(tiny_model_dir), device="cpu", dtype="float32")
    )
    store = TraceStore(tmp_path / "traces.db")
    upstream = LocalUpstream(engine, adapters={"solver": "s", "judge": "j"})
    try:
        with GatewayServer(create_app(upstream, store, model_name="tiny")) as server:
            for session in ("ep1:solver", "ep1:judge", "ep1", "ep1:critic"):
                r = httpx.post(
                    f"{server.url}/sessions/{session}/v1/chat/completions",
                    json={
                        "model": "tiny",
                        "messages": [{"role": "user", "content": "2 + 3?"}],
                        "max_tokens": 3,
                    },
                    timeout=60,
                )
                assert r.status_code == 200, r.text
    finally:
        store.close()
    assert [a for _, a in engine.calls] == ["s", "j", "default", "default"]


def test_solver_judge_trains_an_adapter_per_role_end_to_end(tiny_model_dir: Path, tmp_path: Path) -> None:
    from rllm.trainer.agent_trainer import AgentTrainer  # torch-heavy; only this test needs the trainer

    cfg = _cfg(
        f"model.path={tiny_model_dir}",
        f"trainer.run_dir={tmp_path}",
        "trainer.steps=2",
        "trainer.checkpoint_every=1",
        "trainer.plot=false",
        "trainer.loggers=[jsonl]",
        "workflow.name=solver_judge",
        "data.task=countdown",
        "data.train_size=4",
        "data.test_size=2",
        "rollout.batch_size=2",
        "rollout.group_size=2",
        "rollout.max_tokens=4",
        "eval.before=false",
        "eval.max_tokens=4",
        "lora.rank=4",
        "algorithm.filters.drop_zero_variance=false",
        *ROLES,
        "roles.judge.lr=0.01",
    )
    result = AgentTrainer(cfg).train()
    lines = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2]
    for line in lines:  # both roles' rows reached their own adapter, each at its own rate
        assert line["episodes/failed"] == 0  # every call named an adapter the engine had been given
        assert line["adapter/solver/tokens"] > 0 and line["adapter/judge/tokens"] > 0
        assert "adapter/default/tokens" not in line and line["adapter/default/grad_norm"] == 0
        assert line["adapter/judge/lr"] == pytest.approx(0.01)
        assert line["adapter/solver/lr"] == pytest.approx(cfg.optim.lr)
    checkpoints = sorted(result.run_dir.glob("**/adapters"))
    assert checkpoints and {p.name for p in checkpoints[-1].iterdir()} == {"default", "solver", "judge"}
    for name in ("default", "solver", "judge"):
        assert result.adapter_models[name] == result.final_model_dir / name
        assert (result.final_model_dir / name / "config.json").is_file()
        assert (result.final_model_dir / name / "tokenizer_config.json").is_file()
        assert (result.final_model_dir / name / "adapter" / "adapter_model.safetensors").is_file()
