"""Curation of native workflows' episodes from a run's journal: a solver-judge episode's roles kept apart
(``--role``), and a ReAct tool agent's text tool calls read back as OpenAI ``tool_calls``."""

from __future__ import annotations

import json
from pathlib import Path

from workflow_support import ScriptedEngine, nth_reply, run_episodes

from rllm.cli.main import main
from rllm.eval.curate import CurateFilters, curate
from rllm.eval.curate_sources import conversations_from_run
from rllm.inference.base import SamplingParams
from rllm.inference.local import LocalEngine
from rllm.store import EpisodeJournal
from rllm.tools.builtin import calculator
from rllm.workflows.solver_judge import SolverJudgeWorkflow
from rllm.workflows.tool_agent import ToolAgentWorkflow

SAMPLING = SamplingParams(temperature=1.0, max_tokens=48, seed=0)
QUESTION = {
    "task_id": "q",
    "question": "Which number is larger, 37 or 82? Answer with just the number.",
    "ground_truth": "82",
}
TOOL_TASK = {
    "task_id": "m",
    "question": "What is 12 * 34? Answer with just the number.",
    "ground_truth": "408",
}
CALC = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "12 * 34"}}\n</tool_call>'


def _journal(run_dir: Path, episodes: list) -> None:
    """The episodes as a training run's journal records them (step 0: logged as step 1)."""
    with EpisodeJournal(run_dir / "journal.db") as journal:
        for i, ep in enumerate(episodes):
            journal.record(0, f"r0:{i}", ep)


def test_solver_judge_roles_and_tool_calls_from_a_journal(
    engine: LocalEngine, tmp_path: Path, capsys
) -> None:
    def policy(prompt: str) -> str:
        return "Solution 2" if "Solution 1:" in prompt else ("82" if prompt.count("82") % 2 else "37")

    judged = run_episodes(
        ScriptedEngine(engine, policy), SolverJudgeWorkflow(n_solvers=2), [QUESTION], SAMPLING
    )
    tools = ToolAgentWorkflow([calculator], system_prompt="Use the calculator.", max_turns=3)
    (agent,) = run_episodes(ScriptedEngine(engine, nth_reply([CALC, "408"])), tools, [TOOL_TASK], SAMPLING)
    run = tmp_path / "run"
    _journal(run, [*judged, agent])

    convs, _ = conversations_from_run(run)
    (ep,) = judged
    judge = curate(convs, CurateFilters(role="judge")).kept
    assert len(judge) == 1 and judge[0].reward == ep.trajectories[-1].reward
    assert "Solution 1:" in judge[0].messages[0]["content"]
    solvers = curate(convs, CurateFilters(role="solver", dedupe=False)).kept
    assert [c.reward for c in solvers] == [
        t.reward for t in ep.trajectories[:2]
    ]  # each solver its own reward
    assert {c.role for c in curate(convs, CurateFilters(role="default")).kept} == {"default"}

    # The tool agent's two turns are one conversation; its text tool call is an OpenAI tool call whose id is
    # the one the tool's result answers, and both turns' sampled tokens are counted.
    (conv,) = [c for c in convs if c.task_id == "m"]
    roles = [m["role"] for m in conv.messages]
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    call, result = conv.messages[2], conv.messages[3]
    assert call["content"] == "" and call["tool_calls"][0]["id"] == result["tool_call_id"]
    assert call["tool_calls"][0]["function"] == {
        "name": "calculator",
        "arguments": '{"expression": "12 * 34"}',
    }
    assert result["content"] == "408" and conv.messages[4]["content"] == "408" and conv.reward == 1.0
    assert conv.response_tokens == sum(len(s.response_ids) for s in agent.trajectories[0].steps)
    # --tool-parser none keeps the reply as the text the model wrote
    out = tmp_path / "raw.jsonl"
    assert (
        main(["dataset", "from-run", str(run), "--tool-parser", "none", "--role", "default", "-o", str(out)])
        == 0
    )
    assert "read 4 conversations" in capsys.readouterr().out
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert row["messages"][2] == {"role": "assistant", "content": CALC} and row["source"] == "run:run@1"
