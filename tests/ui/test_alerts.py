"""The monitors' alerts as the UI reads them: `GET /api/runs/{id}` lists each `monitor/<name>/alert[/<check>]`
metric that was ever 1 (the steps it held at, whether it holds now) and the drift monitor's temperature
changes, from the run store a training run writes; the run page draws them as badges (run.js)."""

from __future__ import annotations

from pathlib import Path

from starlette.testclient import TestClient

from rllm.store import RunWriter
from rllm.ui.app import create_app


def test_the_run_api_lists_alerts_and_temperature_changes(tmp_path: Path) -> None:
    store = tmp_path / "rllm.db"
    run = RunWriter.start(store, kind="train", name="watched", config={})
    hacking = {3: 1.0, 4: 1.0, 5: 0.0, 6: 1.0}  # held at steps 3-4, again at 6 (now)
    temperature = {1: 1.0, 2: 1.1, 3: 1.2, 4: 1.1, 5: 1.0, 6: 1.0}
    for step in range(1, 7):
        run.log(
            step,
            {
                "reward/mean": 0.5,
                "monitor/drift/alert": float(step in (2, 3)),
                "monitor/drift/temperature": temperature[step],
                "monitor/drift/temperature_change": round(
                    temperature[step] - temperature.get(step - 1, 1.0), 6
                ),
                "monitor/drift/score": 0.7,  # not an alert key
                "monitor/hacking/alert": hacking.get(step, 0.0),
                "monitor/hacking/alert/same_answer": hacking.get(step, 0.0),
                "monitor/hacking/alert/entropy": 0.0,  # never fired: not listed
            },
        )
    run.finish()
    with TestClient(create_app(store)) as client:
        detail = client.get(f"/api/runs/{run.id}").json()
        quiet = RunWriter.start(store, kind="train", name="quiet", config={})
        quiet.log(1, {"reward/mean": 0.1})
        quiet.finish()
        assert client.get(f"/api/runs/{quiet.id}").json()["alerts"] == []
    assert detail["alerts"] == [
        {
            "key": "monitor/drift/alert",
            "monitor": "drift",
            "check": None,
            "first_step": 2,
            "last_step": 3,
            "steps": 2,
            "active": False,
        },
        {
            "key": "monitor/hacking/alert",
            "monitor": "hacking",
            "check": None,
            "first_step": 3,
            "last_step": 6,
            "steps": 3,
            "active": True,
        },
        {
            "key": "monitor/hacking/alert/same_answer",
            "monitor": "hacking",
            "check": "same_answer",
            "first_step": 3,
            "last_step": 6,
            "steps": 3,
            "active": True,
        },
    ]
    assert detail["temperature_changes"] == [[2, 1.1], [3, 1.2], [4, 1.1], [5, 1.0]]
