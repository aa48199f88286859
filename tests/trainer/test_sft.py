"""``rllm sft``: the data formats, the assistant-only loss mask against the chat template's own rendering, a
short run that learns, exact resume, the final model in the local engine, the UI's view of the run, and the
one-line errors. Real tiny model, real backend, real run store; no mocks."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from rllm.cli.main import main
from rllm.inference.base import SamplingParams
from rllm.inference.chat_template import CHECK_CONVERSATIONS, ChatRenderer
from rllm.inference.local import LocalEngine
from rllm.trainer import SFTConfig, SFTTrainer
from rllm.trainer.backends.base import UnsupportedConfigError
from rllm.trainer.backends.local import micro_batch_order
from rllm.trainer.sft_data import (
    Conversation,
    SFTDataError,
    load_conversations,
    render_conversation,
    render_rows,
)
from rllm.types import TrainSequence
from rllm.ui.app import create_app
from rllm.utils.config import load_config

# A multi-turn conversation with a system prompt, parallel tool calls, tool results and a final answer.
TOOL_CHAT, TOOLS = CHECK_CONVERSATIONS["tool calls"]
TOOL_CHAT = TOOL_CHAT[:-1]  # end on the assistant's answer

# What the tiny model memorises: short, distinct answers to distinct questions.
FACTS = [
    ("Capital of France?", "Paris."),
    ("2 + 2?", "4."),
    ("Color of the sky?", "Blue."),
    ("Hi!", "Hello."),
]


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _facts_file(path: Path) -> Path:
    rows = [
        {
            "messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}],
            "task_id": f"t{i}",
        }
        for i, (q, a) in enumerate(FACTS)
    ]
    return _write_jsonl(path, rows)


@pytest.fixture(scope="module")
def renderer(tiny_model_dir: Path) -> ChatRenderer:
    from transformers import AutoTokenizer

    return ChatRenderer(AutoTokenizer.from_pretrained(tiny_model_dir))


def test_only_assistant_tokens_are_trained_and_they_are_the_templates_own_rendering(
    renderer: ChatRenderer,
) -> None:
    tok = renderer.tokenizer
    (row,) = render_conversation(renderer, Conversation(TOOL_CHAT, TOOLS), tok.eos_token_id)
    # The row is the template's rendering of the whole conversation (up to the last turn's end token).
    full = renderer.render_ids(TOOL_CHAT, TOOLS, add_generation_prompt=False)
    assert row.input_ids == full[: len(row.input_ids)]
    assert tok.decode(full[len(row.input_ids) :]).strip() == ""
    # The trained spans are exactly the assistant turns as the model samples them (text + end token), each
    # right after the prompt the gateway renders for that turn; nothing of the system, user or tool turns.
    spans: list[list[int]] = []
    for i, (t, m) in enumerate(zip(row.input_ids, row.loss_mask)):
        if m and (i == 0 or not row.loss_mask[i - 1]):
            spans.append([])
        if m:
            spans[-1].append(t)
    turns = [(i, m) for i, m in enumerate(TOOL_CHAT) if m["role"] == "assistant"]
    assert len(spans) == len(turns) == 3
    for span, (i, message) in zip(spans, turns):
        text = renderer.assistant_text(message)
        assert span == tok.encode(text, add_special_tokens=False) + [tok.eos_token_id]
        prompt = renderer.render_ids(TOOL_CHAT[:i], TOOLS)
        start = row.loss_mask.index(1, len(prompt) - 1)
        assert start == len(prompt) and row.input_ids[:start] == prompt
    masked_text = tok.decode([t for t, m in zip(row.input_ids, row.loss_mask) if not m])
    assert "get_weather" in masked_text and '"temp_c": 18' in masked_text  # tool list and results masked


def test_overlong_rows_are_truncated_or_dropped_and_counted(renderer: ChatRenderer) -> None:
    eos = renderer.tokenizer.eos_token_id
    short = Conversation([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}])
    long = Conversation([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "word " * 200}])
    n_short = len(render_conversation(renderer, short, eos)[0].input_ids)
    rows, stats = render_rows(
        renderer, [short, long], eos_id=eos, max_length=n_short + 5, overlong="truncate"
    )
    assert (stats.truncated, stats.dropped) == (1, 0) and len(rows[1].input_ids) == n_short + 5
    assert sum(rows[1].loss_mask) > 0
    rows, stats = render_rows(renderer, [short, long], eos_id=eos, max_length=n_short + 5, overlong="drop")
    assert (stats.truncated, stats.dropped) == (0, 1) and len(rows) == 1
    with pytest.raises(SFTDataError, match="raise sft.max_length"):
        render_rows(renderer, [long], eos_id=eos, max_length=4, overlong="truncate")  # no answer token left


def test_each_format_reads_to_the_same_conversations(tmp_path: Path) -> None:
    q, a = FACTS[0]
    want = [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
    files = {
        "messages.jsonl": [{"messages": want, "task_id": "x", "reward": 1.0, "source": "eval"}],
        "prompt_completion.jsonl": [{"prompt": q, "completion": a}],
        "prompt_completion_lists.jsonl": [{"prompt": want[:1], "completion": want[1:]}],
        "prompt_response.json": [{"prompt": q, "response": a, "id": 3}],
    }
    for name, rows in files.items():
        path = tmp_path / name
        if name.endswith(".json"):
            path.write_text(json.dumps(rows))
        else:
            _write_jsonl(path, rows)
        (conv,) = load_conversations(path)
        assert conv.messages == want, name
    with open(tmp_path / "chats.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["messages", "note"])
        writer.writeheader()
        writer.writerow({"messages": json.dumps(want), "note": "ignored"})
    assert load_conversations(tmp_path / "chats.csv")[0].messages == want
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([{"prompt": q, "completion": a}]), tmp_path / "pc.parquet")
    assert load_conversations(tmp_path / "pc.parquet")[0].messages == want
    tool_row = {"messages": TOOL_CHAT, "tools": TOOLS}
    (conv,) = load_conversations(_write_jsonl(tmp_path / "tools.jsonl", [tool_row]), "messages")
    assert conv.tools == TOOLS and conv.messages == TOOL_CHAT


def test_bad_data_and_backends_are_one_line_errors(
    tmp_path: Path, tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    odd = _write_jsonl(tmp_path / "odd.jsonl", [{"question": "q", "answer": "a"}])
    with pytest.raises(SFTDataError, match="cannot tell the SFT format.*'messages'"):
        load_conversations(odd)
    with pytest.raises(FileNotFoundError, match="no such file"):
        load_conversations(tmp_path / "missing.jsonl")
    silent = _write_jsonl(tmp_path / "silent.jsonl", [{"messages": [{"role": "user", "content": "hi"}]}])
    with pytest.raises(SFTDataError, match="row 0: no assistant message"):
        load_conversations(silent)
    cases = [
        ([f"data.train_file={odd}"], "cannot tell the SFT format"),
        ([f"data.train_file={tmp_path / 'missing.jsonl'}"], "no such file"),
        ([f"data.train_file={silent}"], "no assistant message"),
        (["data.format=chatml"], "data.format"),
        ([], "set data.train_file"),
        (["backend.name=tinker"], "cannot run the cross_entropy loss"),
    ]
    for overrides, message in cases:
        assert main(["sft", f"model.path={tiny_model_dir}", *overrides]) == 2, overrides
        err = capsys.readouterr().err.strip()
        assert err.startswith("rllm: error:") and message in err and "\n" not in err, (overrides, err)
    assert main(["sft", "--help-config"]) == 0
    listing = capsys.readouterr().out
    assert "sft.batch_size" in listing and "backend.distributed.world_size" in listing
    with pytest.raises(UnsupportedConfigError, match="cross_entropy"):
        SFTTrainer(load_config(SFTConfig, None, ["backend.name=tinker"]))


def _config(model: Path, data: Path, run_dir: Path, *extra: str) -> SFTConfig:
    return load_config(
        SFTConfig,
        None,
        [
            f"model.path={model}",
            f"data.train_file={data}",
            f"data.test_file={data}",  # memorisation: the held-out loss is the training set's
            f"trainer.run_dir={run_dir}",
            f"trainer.store={run_dir / 'rllm.db'}",
            "lora.enabled=false",
            "optim.lr=0.01",
            "sft.batch_size=2",
            "backend.device=cpu",
            "backend.autocast=none",
            "trainer.loggers=[jsonl]",
            "trainer.plot=false",
            *extra,
        ],
    )


class _Killed(SFTTrainer):
    """A run that dies before step ``kill_at`` (as a killed process would, after its last checkpoint)."""

    kill_at = 12  # the last checkpoint is step 10

    def train_step(self, step: int) -> dict[str, float]:
        if step == self.kill_at:
            raise RuntimeError("killed")
        return super().train_step(step)


def test_a_short_run_learns_resumes_exactly_and_leaves_a_model_the_engine_loads(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    data = _facts_file(tmp_path / "facts.jsonl")
    steps = ["trainer.steps=20", "eval.every_steps=10", "trainer.checkpoint_every=5", "sft.batch_size=4"]
    whole = SFTTrainer(_config(tiny_model_dir, data, tmp_path / "runs", "trainer.name=whole", *steps))
    assert whole.steps == 20 and whole.steps_per_epoch == 1
    result = whole.train()
    assert result.initial_eval_loss is not None and result.final_eval_loss is not None
    assert result.final_eval_loss < 0.1 * result.initial_eval_loss

    killed = _Killed(_config(tiny_model_dir, data, tmp_path / "runs", "trainer.name=resumed", *steps))
    with pytest.raises(RuntimeError, match="killed"):
        killed.train()
    resumed = SFTTrainer(
        _config(
            tiny_model_dir, data, tmp_path / "runs", "trainer.name=resumed", "trainer.resume=true", *steps
        )
    ).train()
    assert resumed.final_train_loss == pytest.approx(result.final_train_loss, rel=1e-5)
    assert resumed.final_eval_loss == pytest.approx(result.final_eval_loss, rel=1e-5)
    lines = [
        json.loads(x) for x in (tmp_path / "runs" / "resumed" / "metrics.jsonl").read_text().splitlines()
    ]
    assert [x["step"] for x in lines] == list(range(21))  # step 0: the eval before training

    # final_model/ is a model directory the local engine serves: it answers what it memorised.
    engine = LocalEngine.from_pretrained(str(result.final_model_dir), device="cpu", dtype="float32")
    try:
        for question, answer in FACTS[:2]:
            prompt = engine.apply_chat_template([{"role": "user", "content": question}])
            (out,) = engine.generate_sync(prompt, SamplingParams(temperature=0.0, max_tokens=8))
            assert engine.tokenizer.decode(out.completion_ids, skip_special_tokens=True).strip() == answer
    finally:
        engine.close()

    # The UI lists the run as kind "sft" and serves its loss curves.
    client = TestClient(create_app(tmp_path / "runs" / "rllm.db"))
    (run,) = [r for r in client.get("/api/runs").json()["runs"] if r["name"] == "whole"]
    assert run["kind"] == "sft" and run["status"] == "finished"
    series = client.get(f"/api/runs/{run['id']}/metrics").json()["series"]
    assert len(series["train/loss"]) == 20 and [p[0] for p in series["eval/loss"]] == [0, 10, 20]


def test_micro_batches_are_length_buckets_that_keep_a_groups_answers_together() -> None:
    def row(prompt: list[int], answer_len: int) -> TrainSequence:
        n = len(prompt) + answer_len
        mask = [0] * len(prompt) + [1] * answer_len
        return TrainSequence(
            input_ids=prompt + [7] * answer_len,
            loss_mask=mask,
            rollout_logprobs=[0.0] * n,
            advantages=[1.0] * n,
        )

    # SFT rows (every prompt different): shortest first, whatever the prompt tokens say.
    sft = [row([9, 1], 30), row([1, 5], 3), row([5, 5], 12)]
    assert micro_batch_order(sft) == [1, 2, 0]
    # A group's answers share a prompt: together, placed by their longest row.
    group = [row([3], 2), row([8], 10), row([3], 20), row([4], 5)]
    assert micro_batch_order(group) == [3, 1, 0, 2]
