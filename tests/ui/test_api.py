"""The UI's JSON API: a real (tiny-model) training run read back through every endpoint over real HTTP;
the metric stream while a run writes; errors; an empty store; the static front end; ``rllm ui``."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from rllm.cli.main import main
from rllm.gateway.server import GatewayServer
from rllm.runner.context import RolloutContext
from rllm.store import RunWriter
from rllm.types import Episode, Step, Trajectory
from rllm.ui.app import create_app

TASKS = [{"task_id": f"t{i}", "question": f"Say something about the number {i}."} for i in range(4)]


async def parity_workflow(task: dict[str, Any], ctx: RolloutContext) -> float:
    """A reward the random tiny model earns about half the time, so groups carry signal."""
    completion = await ctx.chat([{"role": "user", "content": task["question"]}])
    return float(completion.completion_ids[0] % 2 == 0)


@pytest.fixture(scope="module")
def trained(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """A 2-step LoRA GRPO run of the tiny model, recorded in its store (trainer logprobs recomputed)."""
    from rllm.trainer.agent_trainer import AgentTrainer
    from rllm.trainer.config import TrainConfig
    from rllm.utils.config import load_config

    runs = tmp_path_factory.mktemp("runs")
    cfg = load_config(
        TrainConfig,
        None,
        [
            f"model.path={tiny_model_dir}",
            f"trainer.run_dir={runs}",
            "trainer.name=tiny",
            f"trainer.store={runs}/ui.db",
            "trainer.steps=2",
            "trainer.threads=1",
            "trainer.loggers=[jsonl]",
            "trainer.plot=false",
            "eval.before=true",
            "eval.after=true",
            "eval.max_tokens=4",
            "backend.device=cpu",
            "backend.old_logprobs=recompute",
            "lora.rank=4",
            "lora.alpha=8",
            "optim.lr=0.01",
            "rollout.batch_size=2",
            "rollout.group_size=4",
            "rollout.max_tokens=4",
            "trainer.store_episodes_per_step=6",
        ],
    )
    trainer = AgentTrainer(cfg, workflow=parity_workflow, train_tasks=TASKS, test_tasks=TASKS[:2])
    trainer.train()
    return runs / "ui.db", trainer


def test_a_training_run_through_every_endpoint_over_http(
    trained: tuple[Path, Any], tiny_model_dir: Path
) -> None:
    from transformers import AutoTokenizer

    store, trainer = trained
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    with GatewayServer(create_app(store)) as server, httpx.Client(base_url=server.url, timeout=30) as http:

        def get(path: str, **params: Any) -> Any:
            response = http.get(path, params=params)
            assert response.status_code == 200, response.text
            return response.json()

        listing = get("/api/runs")
        assert listing["store"] == str(store)
        [run] = listing["runs"]
        assert run["id"].startswith("tiny-") and run["name"] == "tiny" and run["kind"] == "train"
        assert run["status"] == "finished" and run["step"] == 2 and run["task"] == "larger"
        assert run["model"] == str(tiny_model_dir) and run["ended_at"] >= run["started_at"]
        assert {"reward/mean", "eval/accuracy", "train/loss"} <= set(run["metrics"])
        rid = run["id"]

        detail = get(f"/api/runs/{rid}")
        assert detail["config"]["trainer"]["steps"] == 2 and detail["config"] == get(
            f"/api/runs/{rid}/config"
        )
        assert detail["summary"]["steps"] == 2 and detail["code_version"]
        assert {"reward/mean", "eval/accuracy", "train/loss", "train/grad_norm"} <= set(detail["metric_keys"])

        metrics = get(f"/api/runs/{rid}/metrics")
        assert set(metrics["series"]) == set(detail["metric_keys"]) and metrics["last_step"] == 2
        assert [s for s, _ in metrics["series"]["reward/mean"]] == [1, 2]
        assert [s for s, _ in metrics["series"]["eval/accuracy"]] == [0, 2]
        jsonl = [json.loads(line) for line in (trainer.run_dir / "metrics.jsonl").read_text().splitlines()]
        assert metrics["series"]["reward/mean"][1][1] == pytest.approx(jsonl[-1]["reward/mean"])
        after = get(f"/api/runs/{rid}/metrics", keys="reward/mean,train/loss", after_step=1)
        assert after == {
            "series": {
                "reward/mean": [[2, metrics["series"]["reward/mean"][1][1]]],
                "train/loss": [[2, metrics["series"]["train/loss"][1][1]]],
            },
            "last_step": 2,
        }
        with http.stream("GET", f"/api/runs/{rid}/metrics/stream", params={"keys": "reward/mean"}) as stream:
            body = "".join(stream.iter_text())  # the run has finished: all points, then the end
        assert '"reward/mean": [[1, ' in body and body.rstrip().endswith('data: {"status": "finished"}')

        evals = get(f"/api/runs/{rid}/evals")
        assert [(e["step"], e["n"]) for e in evals["evals"]] == [(0, 2), (2, 2)] and evals["results"] == []

        assert get(f"/api/runs/{rid}/steps") == {"steps": [1, 2]}
        episodes = get(f"/api/runs/{rid}/episodes", limit=50)
        # 6 of each step's 8, evenly over its 2 groups, plus any cut at max_tokens (always kept)
        assert 12 <= episodes["total"] <= 16 and len(episodes["episodes"]) == episodes["total"]
        assert {e["step"] for e in episodes["episodes"]} == {1, 2}
        first = get(f"/api/runs/{rid}/episodes", step=2, limit=1)
        assert 6 <= first["total"] <= 8 and len(first["episodes"]) == 1
        # An episode that was trained on (a group with reward variance: its steps have an advantage).
        for summary in episodes["episodes"]:
            episode = get(f"/api/episodes/{summary['id']}")
            if episode["trajectories"][0]["steps"][0]["advantage"] is not None:
                break
        else:
            pytest.fail("no stored episode has an advantage")
        assert summary["roles"] == ["default"] and summary["n_steps"] == 1
        assert episode["run_id"] == rid and episode["step"] == summary["step"]
        assert episode["task_id"] == summary["task_id"]
        question = next(t["question"] for t in TASKS if t["task_id"] == summary["task_id"])
        [step] = episode["trajectories"][0]["steps"]
        assert step["messages"] == [{"role": "user", "content": question}]
        assert step["response"].startswith(summary["preview"])

        tokens = get(f"/api/episodes/{summary['id']}/tokens", trajectory=0, step=0)
        prompt = [t for t in tokens["tokens"] if t["is_prompt"]]
        response = [t for t in tokens["tokens"] if not t["is_prompt"]]
        assert prompt and all(t["mask"] == 0 and t["logprob"] is None for t in prompt)
        assert question in tokenizer.decode([t["id"] for t in prompt])
        assert 1 <= len(response) <= 4 and all(t["mask"] == 1 for t in response)
        assert all(t["text"] == tokenizer.decode([t["id"]]) for t in tokens["tokens"])
        for t in response:  # the trainer's recomputed logprob agrees with the sampler's
            assert t["advantage"] == pytest.approx(step["advantage"])
            assert t["logprob"] is not None and t["trainer_logprob"] == pytest.approx(t["logprob"], abs=1e-2)
        assert tokens["drift_at"] is None

        assert http.get("/").status_code == 200  # the front end


def test_a_training_run_records_what_it_costs(trained: tuple[Path, Any]) -> None:
    _, trainer = trained
    store = trainer.run_store
    assert store.writes >= 3 and store.write_s / store.writes < 0.5  # per committed step, on a loaded CI box


def _episode(task_id: str, reward: float) -> Episode:
    return Episode(
        task_id=task_id,
        task={"question": "q"},
        reward=reward,
        trajectories=[
            Trajectory(
                steps=[
                    Step(prompt_ids=[1, 2], response_ids=[3, 4], logprobs=[-0.1, -0.2], response_text="hello")
                ]
            )
        ],
    )


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return tmp_path / "rllm.db"


def test_the_metric_stream_delivers_points_as_they_are_written(store: Path) -> None:
    run = RunWriter.start(store, kind="train", name="live", config={})
    app = create_app(store, poll_s=0.05, keepalive_s=0.2)

    def train() -> None:
        time.sleep(0.5)  # silence first: the stream keeps the connection alive
        for step in range(1, 6):
            run.log(step, {"reward/mean": step / 10, "other": 1.0})
            time.sleep(0.1)
        run.finish()

    writer = threading.Thread(target=train)
    events: list[dict[str, Any]] = []
    comments = 0
    with GatewayServer(app) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        writer.start()
        with http.stream(
            "GET", f"/api/runs/{run.id}/metrics/stream", params={"keys": "reward/mean"}
        ) as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            kind = "message"
            for line in stream.iter_lines():
                if line.startswith(":"):
                    comments += 1
                elif line.startswith("event: "):
                    kind = line[len("event: ") :]
                elif line.startswith("data: "):
                    events.append({"kind": kind, **json.loads(line[len("data: ") :])})
                    kind = "message"
        writer.join()
    data = [e for e in events if e["kind"] == "message"]
    points = [p for e in data for p in e["series"]["reward/mean"]]
    assert [s for s, _ in points] == [1, 2, 3, 4, 5]  # every point, once, in order
    assert all(set(e["series"]) == {"reward/mean"} for e in data)
    assert len(data) >= 2, "points should arrive while the run writes, not only at the end"
    assert data[-1]["last_step"] == 5 and events[-1] == {"kind": "end", "status": "finished"}
    assert comments >= 1


def test_errors_are_json_with_the_reason(store: Path) -> None:
    run = RunWriter.start(store, kind="train", name="r", config={})
    run.stage_episodes(1, [_episode("t", 1.0)])
    run.log(1, {"x": 1.0})
    eid = _client(store).get(f"/api/runs/{run.id}/episodes").json()["episodes"][0]["id"]
    client = _client(store)
    for path in (
        "/api/runs/nope",
        "/api/runs/nope/metrics",
        "/api/runs/nope/metrics/stream",
        "/api/runs/nope/episodes",
        "/api/runs/nope/steps",
        "/api/runs/nope/evals",
        "/api/runs/nope/config",
    ):
        response = client.get(path)
        assert response.status_code == 404 and response.json() == {"error": "no run 'nope'"}, path
    assert client.get("/api/episodes/nope").json() == {"error": "no episode 'nope'"}
    assert client.get("/api/episodes/nope/tokens").status_code == 404
    missing = client.get(f"/api/episodes/{eid}/tokens", params={"trajectory": 3})
    assert missing.status_code == 404 and "no trajectory 3 step 0" in missing.json()["error"]
    assert client.get("/api/nothing/here").status_code == 404
    for path, params, word in [
        (f"/api/runs/{run.id}/metrics", {"after_step": "abc"}, "after_step"),
        (f"/api/runs/{run.id}/metrics", {"max_points": "-1"}, "max_points"),
        (f"/api/runs/{run.id}/metrics/stream", {"after_step": "x"}, "after_step"),
        (f"/api/runs/{run.id}/episodes", {"limit": "0"}, "limit"),
        (f"/api/runs/{run.id}/episodes", {"correct": "maybe"}, "correct"),
        (f"/api/runs/{run.id}/episodes", {"min_reward": "high"}, "min_reward"),
        (f"/api/runs/{run.id}/evals", {"offset": "-3"}, "offset"),
        (f"/api/episodes/{eid}/tokens", {"step": "-1"}, "step"),
    ]:
        response = client.get(path, params=params)
        assert response.status_code == 400 and word in response.json()["error"], (path, response.text)
    run.finish()


def test_an_empty_store_lists_no_runs(tmp_path: Path) -> None:
    client = _client(tmp_path / "runs" / "rllm.db")
    assert client.get("/api/runs").json() == {"runs": [], "store": str(tmp_path / "runs" / "rllm.db")}
    assert client.get("/api/runs/x").status_code == 404
    assert not (tmp_path / "runs").exists()


def test_the_front_end_is_served_with_deep_links(tmp_path: Path) -> None:
    static = tmp_path / "static"
    (static / "js").mkdir(parents=True)
    (static / "index.html").write_text("<html>the app</html>")
    (static / "js" / "app.js").write_text("export {};")
    client = TestClient(create_app(tmp_path / "rllm.db", static_dir=static))
    assert client.get("/").text == "<html>the app</html>"
    assert client.get("/runs/some-run/episodes").text == "<html>the app</html>"  # a reloaded deep link
    assert client.get("/js/app.js").text == "export {};"
    assert client.get("/api/runs/x").headers["content-type"] == "application/json"  # never the app
    bare = TestClient(create_app(tmp_path / "rllm.db", static_dir=tmp_path / "no-front-end"))
    assert "/api/runs" in bare.get("/").text


def test_rllm_ui_serves_the_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import uvicorn

    served: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: served.update(app=app, **kw))
    assert main(["ui", "--store", str(tmp_path / "none.db"), "--port", str(_free_port())]) == 0
    assert served["host"] == "127.0.0.1"
    assert TestClient(served["app"]).get("/api/runs").json() == {
        "runs": [],
        "store": str(tmp_path / "none.db"),
    }

    monkeypatch.setenv("RLLM_STORE", str(tmp_path / "env.db"))
    assert main(["ui", "--port", str(_free_port())]) == 0
    assert TestClient(served["app"]).get("/api/runs").json()["store"] == str(tmp_path / "env.db")


def test_rllm_ui_on_a_taken_port_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        assert main(["ui", "--port", str(taken.getsockname()[1])]) == 2
    assert "pass another --port" in capsys.readouterr().err


def _client(store: Path) -> TestClient:
    return TestClient(create_app(store))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
