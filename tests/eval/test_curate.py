"""Curation (``rllm dataset from-eval`` / ``from-run``): conversations read back from a real eval's trace
store and a real training run's journal, each filter's effect, best-of-k order, roles, tool calls kept as
OpenAI ``tool_calls``, rows a chat template renders, and one-line errors."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from transformers import AutoTokenizer

from rllm.cli.main import main
from rllm.data.builtin import make_tasks
from rllm.eval.curate import Conversation, CurateFilters, CurationError, curate
from rllm.eval.curate_sources import conversations_from_eval, conversations_from_run
from rllm.eval.runner import EvalSpec, load_results, run_eval
from rllm.gateway.traces import TraceQuery, TraceStore
from rllm.sdk.decorators import AgentConfig, evaluator, rollout
from rllm.store import EpisodeJournal, EpisodeQuery, StoreReader
from rllm.types import Episode, Outcome

TOOL = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
    },
}
CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "calculator", "arguments": '{"expression": "2+3"}'},
}


@rollout(name="curate_flow")
async def curate_flow(task: dict[str, Any], config: AgentConfig) -> str:
    """Three roles per episode: a solver answers, a judge reads the answer, and the default session holds a
    tool conversation over two calls (an earlier calculator call and its result, then a follow-up)."""
    solver = await config.async_client("solver").chat.completions.create(
        model=config.model, messages=[{"role": "user", "content": task["question"]}]
    )
    answer = solver.choices[0].message.content or ""
    await config.async_client("judge").chat.completions.create(
        model=config.model, messages=[{"role": "user", "content": f"Is this right? {answer}"}]
    )
    history = [
        {"role": "system", "content": "Use the calculator."},
        {"role": "user", "content": task["question"]},
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "5"},
    ]
    client = config.async_client()
    first = await client.chat.completions.create(model=config.model, messages=history, tools=[TOOL])
    history += [{"role": "assistant", "content": first.choices[0].message.content or ""}]
    history += [{"role": "user", "content": "And the final answer?"}]
    await client.chat.completions.create(model=config.model, messages=history, tools=[TOOL])
    return answer


@evaluator(name="by_length")
def by_length(task: dict[str, Any], episode: Episode) -> Outcome:
    """A grade that is a function of the answer (its length), so rewards spread over 0, 0.5 and 1."""
    reward = (len(episode.info["output"]) % 3) / 2
    return Outcome(reward=reward, is_correct=reward == 1.0)


@pytest.fixture(scope="module")
def eval_results(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("curate_eval") / "larger.jsonl"
    spec = EvalSpec(
        dataset="larger",
        output=out,
        model=str(tiny_model_dir),
        k=3,
        temperature=1.0,
        max_tokens=8,
        device="cpu",
        dtype="float32",
    )
    run_eval(spec, make_tasks("larger", "test", 4), curate_flow, by_length, show_progress=False)
    return out


def test_from_eval_reads_every_sample_of_every_role(eval_results: Path, tiny_model_dir: Path) -> None:
    rows = load_results(eval_results)
    convs, note = conversations_from_eval(eval_results)
    assert len(rows) == 12 and "12 samples" in note
    assert Counter(c.role for c in convs) == {"default": 12, "solver": 12, "judge": 12}
    by_source = {(c.source, c.role): c for c in convs}
    with TraceStore(eval_results.with_suffix(".traces.db")) as store:
        for row in rows:
            mine = [
                c
                for c in convs
                if c.source == f"eval:larger.jsonl#{row['sample']}" and c.task_id == row["task_id"]
            ]
            assert {c.role for c in mine} == {"default", "solver", "judge"}
            assert all(c.reward == row["reward"] and c.is_correct == row["is_correct"] for c in mine)
            (solver,) = [c for c in mine if c.role == "solver"]
            assert solver.messages[-1] == {"role": "assistant", "content": row["output"]}  # the graded reply
            (conv,) = [c for c in mine if c.role == "default"]
            # The two calls of the default session are one conversation: the earlier tool call kept as OpenAI
            # tool_calls, both replies in it, their sampled tokens counted from the traces.
            assert [m["role"] for m in conv.messages] == [
                "system",
                "user",
                "assistant",
                "tool",
                "assistant",
                "user",
                "assistant",
            ]
            assert conv.messages[2]["tool_calls"] == [CALL] and conv.messages[3]["tool_call_id"] == "call_1"
            assert conv.tools == [TOOL]
            traces = [t for _, t in store.query(TraceQuery(session_id=row["session_id"]))]
            assert len(traces) == 2
            assert conv.response_tokens == sum(len(t.completion_token_ids) for t in traces)
            assert conv.messages[4]["content"] == traces[0].response_text
            assert conv.messages[6]["content"] == traces[1].response_text
    assert by_source  # every conversation has a source
    # Rows a chat template renders: the messages (tool calls, tool results) and the tools.
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    text = tok.apply_chat_template(conv.row()["messages"], tools=conv.row()["tools"], tokenize=False)
    assert "Use the calculator." in text and conv.messages[-1]["content"] in text


def _conv(task: str, reward: float, order: int, tokens: int | None = 5, **kw: Any) -> Conversation:
    messages = [{"role": "user", "content": task}, {"role": "assistant", "content": f"a{order}"}]
    return Conversation(
        messages=messages,
        task_id=task,
        reward=reward,
        is_correct=reward == 1.0,
        source=f"s{order}",
        response_tokens=tokens,
        order=order,
        **kw,
    )


def test_each_filter_drops_what_it_says(eval_results: Path) -> None:
    convs, note = conversations_from_eval(eval_results)
    read = len(convs)
    rewards = Counter(c.reward for c in convs if c.role == "solver")
    assert len(rewards) > 1, f"the grade should spread rewards, got {rewards}"

    result = curate(convs, CurateFilters(min_reward=0.5), note=note)
    assert len(result.kept) == sum(c.reward >= 0.5 for c in convs) and result.dropped["--min-reward"] > 0
    assert all(c.reward >= 0.5 for c in result.kept) and result.read == read

    result = curate(convs, CurateFilters(correct_only=True))
    assert len(result.kept) == sum(c.is_correct is True for c in convs) > 0
    assert result.mean_reward == 1.0

    result = curate(convs, CurateFilters(role="judge"))
    assert {c.role for c in result.kept} == {"judge"} and result.dropped["--role"] == 24

    lengths = sorted(c.response_tokens for c in convs)
    mid = lengths[len(lengths) // 2]
    short = curate(convs, CurateFilters(max_tokens=mid, dedupe=False))
    long = curate(convs, CurateFilters(min_tokens=mid + 1, dedupe=False))
    assert len(short.kept) + len(long.kept) == read and short.length_unit == "tokens"
    assert short.dropped["--max-tokens"] == len(long.kept)

    # best-of-1 per (task, role): the highest reward of each task's samples, graded correct first on ties.
    best = curate(convs, CurateFilters(role="solver", best_of=1))
    assert len(best.kept) == best.tasks == 4
    for c in best.kept:
        assert c.reward == max(o.reward for o in convs if o.role == "solver" and o.task_id == c.task_id)
    text = best.summary()
    assert "read 36 conversations" in text and "dropped by --best-of: 8" in text and "of 4 tasks" in text

    # Nothing left: the message names the filter that removed the last ones.
    with pytest.raises(
        CurationError, match=r"--min-reward 2.0 removed the last 36 \(highest reward 1\), of 36"
    ):
        curate(convs, CurateFilters(min_reward=2.0))
    with pytest.raises(
        CurationError, match=r"--role coder matched none \(roles read: default, judge, solver\)"
    ):
        curate(convs, CurateFilters(role="coder"))


def test_best_of_order_dedupe_and_chars_when_tokens_are_unknown() -> None:
    convs = [
        _conv("t1", 0.5, 0, tokens=9),
        _conv("t1", 1.0, 1, tokens=9),
        _conv("t1", 1.0, 2, tokens=3),  # same reward, shorter: ranks first
        _conv("t1", 1.0, 3, tokens=3),  # a tie on everything: the first read wins
        _conv("t2", 0.0, 4),
    ]
    convs.append(_conv("t2", 0.0, 4))  # an identical conversation: deduped
    result = curate(convs, CurateFilters(best_of=2))
    assert [c.order for c in result.kept] == [2, 3, 4] and result.dropped == {
        "failed": 0,
        "dedupe": 1,
        "--best-of": 2,
    }
    assert len(curate(convs, CurateFilters(dedupe=False)).kept) == 6

    no_tokens = [_conv("t1", 1.0, 0, tokens=None), _conv("t2", 1.0, 1, tokens=None)]
    no_tokens[1].messages[-1]["content"] = "a much longer answer"
    result = curate(no_tokens, CurateFilters(max_tokens=5))  # chars: "a0" passes, the long one does not
    assert [c.order for c in result.kept] == [0] and result.length_unit == "chars"
    assert "response lengths in chars" in result.summary()

    failed = [_conv("t1", 1.0, 0, failed=True)]
    with pytest.raises(CurationError, match="every episode read had failed"):
        curate(failed, CurateFilters())
    with pytest.raises(CurationError, match="--best-of must be at least 1"):
        CurateFilters(best_of=0)


# ------------------------------------------------------------------------------------------ runs

RUN_TASKS = [{"task_id": f"t{i}", "question": f"Say something about the number {i}."} for i in range(4)]


@rollout(name="tool_run")
async def tool_run(task: dict[str, Any], config: AgentConfig) -> float:
    """Two calls of one conversation after an earlier calculator call; the reward is the parity of the
    last reply's first token (the random model earns it about half the time)."""
    history = [
        {"role": "user", "content": task["question"]},
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "5"},
    ]
    client = config.async_client()
    first = await client.chat.completions.create(model=config.model, messages=history, tools=[TOOL])
    history += [{"role": "assistant", "content": first.choices[0].message.content or ""}]
    history += [{"role": "user", "content": "And the final answer?"}]
    last = await client.chat.completions.create(model=config.model, messages=history, tools=[TOOL])
    return float(len(last.choices[0].message.content or "") % 2 == 0)


@pytest.fixture(scope="module")
def train_run(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real 2-step LoRA GRPO run of an @rllm.rollout flow on the tiny model (2 tasks x 4 attempts a step):
    its journal, trace store and run store."""
    from run_support import tiny_run_config

    from rllm.trainer.agent_trainer import AgentTrainer

    runs = tmp_path_factory.mktemp("curate_runs")
    cfg = tiny_run_config(
        tiny_model_dir,
        runs,
        "job",
        f"trainer.store={runs / 'rllm.db'}",
        "trainer.steps=2",
        "trainer.store_episodes_per_step=2",
        "rollout.max_tokens=4",
    )
    AgentTrainer(cfg, workflow=tool_run, train_tasks=RUN_TASKS, test_tasks=RUN_TASKS[:1]).train()
    return runs / "job"


def test_from_run_reads_every_journaled_episode(train_run: Path, capsys: pytest.CaptureFixture) -> None:
    with EpisodeJournal(train_run / "journal.db") as journal:
        episodes = {s + 1: list(journal.episodes(s).values()) for s in journal.steps()}
    assert sorted(episodes) == [1, 2] and all(len(e) == 8 for e in episodes.values())
    convs, note = conversations_from_run(train_run)
    assert "16 episodes, every one the run finished" in note and len(convs) == 16
    for step, eps in episodes.items():
        mine = [c for c in convs if c.source == f"run:job@{step}"]
        assert len(mine) == 8 and all(c.step == step for c in mine)
        for ep, conv in zip(eps, mine):
            # The two calls are one conversation, whether they trained as one merged step or as two (the
            # random model's text can re-tokenize differently: a template-drift split): the last call's
            # messages (the earlier tool call as OpenAI tool_calls) and reply, the tools from the trace store.
            steps = ep.trajectories[0].steps
            assert sum(s.info["calls"] for s in steps) == 2
            last = steps[-1]
            assert conv.messages == [*last.messages, {"role": "assistant", "content": last.response_text}]
            assert [m["role"] for m in conv.messages] == [
                "user",
                "assistant",
                "tool",
                "assistant",
                "user",
                "assistant",
            ]
            assert conv.messages[1]["tool_calls"] == [CALL] and conv.tools == [TOOL]
            assert (conv.reward, conv.task_id) == (ep.reward, ep.task_id)
            assert conv.response_tokens == sum(sum(s.response_mask) for s in steps)  # sampled tokens only
        assert any(len(ep.trajectories[0].steps) == 1 for ep in eps)  # some merged into one step

    # The CLI, the run named in its run store, step 2 only.
    out = train_run.parent / "step2.jsonl"
    store = train_run.parent / "rllm.db"
    argv = [
        "dataset",
        "from-run",
        "job",
        "--store",
        str(store),
        "--steps",
        "2:",
        "--keep-duplicates",
        "-o",
        str(out),
    ]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 8 and {r["source"] for r in rows} == {"run:job@2"}
    assert "dropped by --steps: 8" in printed and f"wrote {out}" in printed
    with pytest.raises(CurationError, match=r"--steps 5: matched none \(steps read: 1 to 2\)"):
        curate(convs, CurateFilters(steps=(5, None)))
    assert all(r["messages"][-1]["role"] == "assistant" for r in rows)

    # Without its journal, the run store's sample of episodes is what there is, and the summary says so.
    moved = train_run.parent / "journal.db.away"
    shutil.move(train_run / "journal.db", moved)
    try:
        stored, note = conversations_from_run("job", store=store)
        reader = StoreReader(store)
        (run_id,) = [r["id"] for r in reader.runs() if r["name"] == "job"]
        total = sum(reader.episodes(run_id, EpisodeQuery(step=s))["total"] for s in (1, 2))
        assert len(stored) == total and "only the sample" in note
        assert {c.step for c in stored} == {1, 2}
        # from-run on the directory itself refuses: it is no longer a journaling run's directory
        assert main(["dataset", "from-run", str(train_run)]) == 1
        assert "has no journal.db" in capsys.readouterr().err
    finally:
        shutil.move(moved, train_run / "journal.db")


def test_cli_errors_are_one_line(eval_results: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    def err(argv: list[str]) -> str:
        assert main(argv) == 1
        text = capsys.readouterr().err
        assert text.count("\n") == 1, text
        return text

    assert "no results file" in err(["dataset", "from-eval", str(tmp_path / "none.jsonl")])
    lonely = tmp_path / "copied.jsonl"
    shutil.copy(eval_results, lonely)  # the results without the trace store beside them
    assert "has no trace store beside it (copied.traces.db)" in err(["dataset", "from-eval", str(lonely)])
    assert "--max-tokens 0 removed the last" in err(
        ["dataset", "from-eval", str(eval_results), "--max-tokens", "0"]
    )
    text = err(
        ["dataset", "from-eval", str(eval_results), "--min-reward", "3", "-o", str(tmp_path / "x.jsonl")]
    )
    assert "--min-reward 3.0 removed the last 36 (highest reward 1), of 36 conversations read" in text
    assert not (tmp_path / "x.jsonl").exists()  # nothing written
    assert "--steps takes A:B" in err(["dataset", "from-run", str(tmp_path), "--steps", "two"])
    assert "no journal.db" in err(["dataset", "from-run", str(tmp_path)])
    empty = tmp_path / "empty_run"
    EpisodeJournal(empty / "journal.db").close()
    assert "no finished episodes" in err(["dataset", "from-run", str(empty)])


def test_cli_from_eval_writes_messages_rows_and_registers(
    eval_results: Path, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RLLM_DATASETS_DIR", str(tmp_path / "data"))
    out = tmp_path / "solver.jsonl"
    argv = ["dataset", "from-eval", str(eval_results), "-o", str(out), "--role", "solver", "--best-of", "1"]
    assert main([*argv, "--register", "curated"]) == 0
    printed = capsys.readouterr().out
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 4 and {r["role"] for r in rows} == {"solver"}
    assert set(rows[0]) == {
        "messages",
        "task_id",
        "reward",
        "is_correct",
        "role",
        "source",
        "response_tokens",
    }
    assert [m["role"] for m in rows[0]["messages"]] == ["user", "assistant"]
    assert "read 36 conversations" in printed and "kept 4 conversations of 4 tasks" in printed
    assert "registered as dataset curated" in printed
    from rllm.data.registry import DatasetRegistry

    registered = DatasetRegistry().load("curated", "train")
    assert [r["metadata"]["messages"] for r in registered] == [r["messages"] for r in rows]
    assert [r["question"] for r in registered] == [r["messages"][0]["content"] for r in rows]
