"""``rllm eval``: pass@k, results that re-load, resuming (also after kill -9), and every way to point it at a
model (in-process engine, an OpenAI-compatible URL), with built-in and user flows."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from math import comb
from pathlib import Path

import pytest

from rllm.cli.main import main
from rllm.data.builtin import make_tasks
from rllm.envs.frozenlake import frozenlake_tasks
from rllm.eval.flows import chat_flow, env_flow, reward_evaluator
from rllm.eval.passk import ks_to_report, mean_pass_at_k, pass_at_k
from rllm.eval.runner import EvalSpec, load_results, run_eval, summarize
from rllm.rewards.basic import number_reward

# ------------------------------------------------------------------------------------------ pass@k


@pytest.mark.parametrize(("n", "c"), [(1, 0), (1, 1), (4, 0), (4, 1), (4, 2), (4, 4), (7, 3), (10, 1)])
def test_pass_at_k_is_the_chance_that_k_of_the_samples_hold_a_correct_one(n: int, c: int) -> None:
    samples = [True] * c + [False] * (n - c)
    for k in range(1, n + 1):
        draws = list(itertools.combinations(samples, k))  # every way to pick k of the n samples
        assert pass_at_k(n, c, k) == pytest.approx(sum(any(d) for d in draws) / len(draws))
        assert pass_at_k(n, c, k) == pytest.approx(1 - comb(n - c, k) / comb(n, k))


def test_pass_at_k_large_n_and_bad_input() -> None:
    assert pass_at_k(200, 1, 1) == pytest.approx(0.005)
    assert pass_at_k(200, 13, 100) == pytest.approx(1 - comb(187, 100) / comb(200, 100))
    assert mean_pass_at_k([[True, False], [False, False]], 1) == pytest.approx(0.25)
    assert ks_to_report(1) == [1] and ks_to_report(8) == [1, 2, 4, 8] and ks_to_report(6) == [1, 2, 4, 6]
    with pytest.raises(ValueError, match="at least 4 samples"):
        pass_at_k(2, 1, 4)
    with pytest.raises(ValueError, match="0 <= c <= n"):
        pass_at_k(2, 3, 1)
    with pytest.raises(ValueError, match="no items"):
        mean_pass_at_k([], 1)


def test_spec_refuses_greedy_pass_at_k(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="temperature > 0"):
        EvalSpec(dataset="larger", output=tmp_path / "r.jsonl", k=4, temperature=0.0)
    with pytest.raises(ValueError, match="k <= n"):
        EvalSpec(dataset="larger", output=tmp_path / "r.jsonl", k=4, n=2)
    assert EvalSpec(dataset="larger", output=tmp_path / "r.jsonl").temperature == 0.0
    assert EvalSpec(dataset="larger", output=tmp_path / "r.jsonl", k=4).temperature == 0.6


# ------------------------------------------------------------------------------------------ running


def _spec(tmp_path: Path, model: Path, **kw) -> EvalSpec:
    defaults = {
        "dataset": "larger",
        "output": tmp_path / "larger.jsonl",
        "model": str(model),
        "max_tokens": 8,
        "device": "cpu",
        "dtype": "float32",
    }
    return EvalSpec(**{**defaults, **kw})


def test_eval_writes_rows_that_reload_and_resumes_without_redoing(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    tasks = make_tasks("larger", "test", 5)
    flow, grade = chat_flow(), reward_evaluator(number_reward)
    spec = _spec(tmp_path, tiny_model_dir, k=2, max_examples=5)
    summary = run_eval(spec, tasks, flow, grade, show_progress=False)
    rows = load_results(spec.output)
    assert len(rows) == 10 and {(r["task_id"], r["sample"]) for r in rows} == {
        (t["task_id"], s) for t in tasks for s in (0, 1)
    }
    assert all(r["error"] is None and isinstance(r["output"], str) for r in rows)
    for r in rows:  # each row's verdict is the reward's verdict on the stored reply
        task = next(t for t in tasks if t["task_id"] == r["task_id"])
        assert r["is_correct"] == number_reward(task, r["output"]).is_correct
    assert summary.items == 5 and summary.samples_per_item == 2 and set(summary.pass_at) == {1, 2}
    assert summary == summarize(rows, spec, summary.wall_s)  # the summary is a function of the file
    assert json.loads(spec.output.with_suffix(".summary.json").read_text())["accuracy"] == summary.accuracy
    assert spec.output.with_suffix(".traces.db").exists()  # every call went through the gateway

    # Asking for more samples resumes: only the new ones run, the old rows are kept as they were.
    again = run_eval(
        _spec(tmp_path, tiny_model_dir, k=2, n=3, temperature=0.6), tasks, flow, grade, show_progress=False
    )
    rows2 = load_results(spec.output)
    assert rows2[:10] == rows and len(rows2) == 15 and {r["sample"] for r in rows2[10:]} == {2}
    assert again.samples_per_item == 3 and set(again.pass_at) == {1, 2, 3}

    # Nothing left to do: no new rows.
    run_eval(
        _spec(tmp_path, tiny_model_dir, k=2, n=3, temperature=0.6), tasks, flow, grade, show_progress=False
    )
    assert load_results(spec.output) == rows2
    # Another eval's file is refused, not mixed in; --no-resume starts over.
    with pytest.raises(ValueError, match="another eval"):
        run_eval(
            _spec(tmp_path, tiny_model_dir, k=2, temperature=0.9), tasks, flow, grade, show_progress=False
        )
    run_eval(_spec(tmp_path, tiny_model_dir, resume=False), tasks, flow, grade, show_progress=False)
    assert len(load_results(spec.output)) == 5


def test_failed_samples_are_recorded_then_rerun(tiny_model_dir: Path, tmp_path: Path) -> None:
    tasks = make_tasks("larger", "test", 3)
    calls = {"n": 0}

    def flaky(task: dict, episode) -> bool:
        calls["n"] += 1
        if task["task_id"] == tasks[0]["task_id"] and calls["n"] <= 3:
            raise RuntimeError("grader down")
        return True

    spec = _spec(tmp_path, tiny_model_dir, retries=0)
    first = run_eval(spec, tasks, chat_flow(), flaky, show_progress=False)
    assert first.failed == 1 and first.accuracy == pytest.approx(2 / 3)  # a failed sample counts as wrong
    assert next(r["error"] for r in load_results(spec.output) if r["error"]).endswith("grader down")
    second = run_eval(spec, tasks, chat_flow(), flaky, show_progress=False)
    assert second.failed == 0 and second.accuracy == 1.0
    assert len(load_results(spec.output)) == 4  # only the failed one ran again


def test_killed_eval_resumes_without_redoing_finished_samples(tiny_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "killed.jsonl"
    cmd = [
        sys.executable,
        "-m",
        "rllm",
        "eval",
        "larger",
        "--model",
        str(tiny_model_dir),
        "--max-examples",
        "40",
        "--max-tokens",
        "48",
        "--concurrency",
        "1",
        "--device",
        "cpu",
        "--dtype",
        "float32",
        "--output",
        str(out),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not out.exists() or len(out.read_text().splitlines()) < 3):
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = load_results(out)
    assert 3 <= len(before) < 40, "the eval finished before it could be killed"

    assert main(cmd[3:]) == 0
    after = load_results(out)
    assert after[: len(before)] == before  # finished samples kept as they were ...
    keys = [(r["task_id"], r["sample"]) for r in after]
    assert len(keys) == len(set(keys)) == 40  # ... and none ran twice


def test_cli_prints_accuracy_and_pass_at_k(tiny_model_dir: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "cli.jsonl"
    code = main(
        [
            "eval",
            "larger",
            "--model",
            str(tiny_model_dir),
            "--max-examples",
            "3",
            "--k",
            "2",
            "--max-tokens",
            "8",
            "--device",
            "cpu",
            "--output",
            str(out),
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0
    assert "accuracy" in printed and "pass@2" in printed and "mean@2" in printed
    assert len(load_results(out)) == 6


def test_cli_errors_say_what_to_fix(tmp_path: Path, capsys) -> None:
    assert main(["eval", "no-such-dataset", "--output", str(tmp_path / "x.jsonl")]) == 2
    assert "no-such-dataset" in capsys.readouterr().err
    assert main(["eval", "larger", "--base-url", "http://127.0.0.1:9/v1"]) == 2
    assert "--model" in capsys.readouterr().err
    assert (
        main(
            [
                "eval",
                "larger",
                "--base-url",
                "http://127.0.0.1:9/v1",
                "--model",
                "m",
                "--output",
                str(tmp_path / "y.jsonl"),
            ]
        )
        == 2
    )
    assert "no OpenAI-compatible server answers" in capsys.readouterr().err


def test_eval_against_an_openai_compatible_url(tiny_model_dir: Path, tmp_path: Path, capsys) -> None:
    """--base-url: the server here is our own gateway over the tiny model, reached only by HTTP."""
    from rllm.gateway.app import create_app
    from rllm.gateway.server import GatewayServer
    from rllm.gateway.traces import TraceQuery, TraceStore
    from rllm.inference.local import LocalEngine

    engine = LocalEngine.from_pretrained(str(tiny_model_dir), device="cpu", dtype="float32")
    store = TraceStore(tmp_path / "server.db")
    with GatewayServer(create_app(engine, store, model_name="tiny")) as server:
        out = tmp_path / "remote.jsonl"
        code = main(
            [
                "eval",
                "larger",
                "--base-url",
                f"{server.url}/v1",
                "--model",
                "tiny",
                "--max-examples",
                "3",
                "--max-tokens",
                "8",
                "--output",
                str(out),
            ]
        )
        assert code == 0, capsys.readouterr().err
        served = store.query(TraceQuery(limit=100))
    rows = load_results(out)
    assert len(rows) == 3 and rows[0]["model"] == f"tiny@{server.url}/v1"
    assert sorted(t.response_text for _, t in served) == sorted(r["output"] for r in rows)
    store.close()


def test_user_flow_and_evaluator_from_a_file(tiny_model_dir: Path, tmp_path: Path, capsys) -> None:
    agent = tmp_path / "my_agent.py"
    agent.write_text(
        "import rllm\n\n"
        "@rllm.rollout\n"
        "def solve(task, config):\n"
        "    reply = config.client().chat.completions.create(model=config.model, messages=[\n"
        "        {'role': 'user', 'content': task['question']}])\n"
        "    return reply.choices[0].message.content\n\n"
        "@rllm.evaluator\n"
        "def always_right(task, episode):\n"
        "    return rllm.Outcome(reward=1.0, is_correct=True, info={'len': len(episode.info['output'])})\n"
    )
    out = tmp_path / "user.jsonl"
    code = main(
        [
            "eval",
            "larger",
            "--model",
            str(tiny_model_dir),
            "--max-examples",
            "2",
            "--max-tokens",
            "8",
            "--device",
            "cpu",
            "--flow",
            f"{agent}:solve",
            "--evaluator",
            f"{agent}:always_right",
            "--output",
            str(out),
        ]
    )
    assert code == 0, capsys.readouterr().err
    rows = load_results(out)
    assert [r["is_correct"] for r in rows] == [True, True] and all("len" in r["info"] for r in rows)


def test_frozenlake_eval_plays_the_maps(tiny_model_dir: Path, tmp_path: Path) -> None:
    tasks = frozenlake_tasks("test", 4)
    summary = run_eval(
        _spec(tmp_path, tiny_model_dir, dataset="frozenlake", output=tmp_path / "fl.jsonl"),
        tasks,
        env_flow("frozenlake"),
        None,
        show_progress=False,
    )
    rows = load_results(tmp_path / "fl.jsonl")
    assert summary.items == 4 and summary.failed == 0
    for r in rows:
        assert 1 <= len(r["info"]["moves"]) <= 5 and r["reward"] == float(r["is_correct"])


def test_frozenlake_game_options_reach_the_game_and_are_refused_elsewhere(
    tiny_model_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "fl2.jsonl"
    code = main(
        [
            "eval",
            "frozenlake",
            "--model",
            str(tiny_model_dir),
            "--max-examples",
            "3",
            "--max-tokens",
            "4",
            "--device",
            "cpu",
            "--max-turns",
            "2",
            "--history-turns",
            "all",
            "--output",
            str(out),
            "--no-store",
        ]
    )
    assert code == 0, capsys.readouterr().err
    assert all(1 <= len(r["info"]["moves"]) <= 2 for r in load_results(out))
    code = main(["eval", "larger", "--model", str(tiny_model_dir), "--max-turns", "2", "--no-store"])
    assert code == 2 and "--max-turns" in capsys.readouterr().err
    code = main(
        ["eval", "frozenlake", "--model", str(tiny_model_dir), "--history-turns", "some", "--no-store"]
    )
    assert code == 2 and "--history-turns takes a whole number or 'all'" in capsys.readouterr().err
