"""A tinker-cookbook RL recipe, unchanged, against ``rllm serve tinker``: ``recipes/math_rl/train.py``'s
own ``cli_main`` on its arithmetic environment (addition problems generated in code: no data download),
three steps on the tiny model.

What it needed configuring (all recipe options, none of its code): ``base_url`` (or ``TINKER_BASE_URL``)
and a ``tml-`` key; ``model_name`` = the served model's directory (the cookbook loads the tokenizer by that
name, so a directory keeps it off the hub); ``renderer_name=role_colon`` (the cookbook cannot guess a
renderer for a model it does not know); ``loss_fn=importance_sampling`` (the recipe's default,
``stable_reinforce``, is not supported); and small sizes. Skipped without the ``tinker-cookbook`` extra;
CI's extras tier installs it (``RLLM_TEST_EXTRAS=tinker-cookbook`` makes a missing one fail).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from ci_support import require_import
from tinker_support import API_KEY

from rllm.serve.tinker import ServerThread, TinkerService

INSTALL = "bash scripts/setup.sh tinker-cookbook && bash scripts/setup_cookbook.sh"
math_rl_train = require_import("tinker_cookbook.recipes.math_rl.train", INSTALL, extra="tinker-cookbook")


def test_math_rl_recipe_runs_unchanged(
    tinker_server: ServerThread, tinker_service: TinkerService, base_model: str, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("TINKER_API_KEY", API_KEY)
    monkeypatch.setenv("TINKER_TELEMETRY", "0")
    log_path = tmp_path / "math_rl"
    config = math_rl_train.CLIConfig(
        model_name=base_model,
        renderer_name="role_colon",
        env="arithmetic",
        base_url=tinker_server.base_url,
        lora_rank=4,
        group_size=2,
        groups_per_batch=2,
        max_tokens=5,
        learning_rate=1e-3,
        loss_fn="importance_sampling",
        max_steps=3,
        eval_every=0,
        save_every=0,
        log_path=str(log_path),
        behavior_if_log_dir_exists="delete",
    )
    asyncio.run(math_rl_train.cli_main(config))
    steps = [json.loads(line) for line in (log_path / "metrics.jsonl").read_text().splitlines()]
    trained = [s for s in steps if "env/all/total_episodes" in s]
    assert [s["step"] for s in trained] == [0, 1, 2]
    assert all(s["env/all/total_episodes"] == 4 and s["tokens/trained"] > 0 for s in trained)
    # the recipe's final checkpoint: a training state on disk and sampler weights in the service
    checkpoints = [json.loads(line) for line in (log_path / "checkpoints.jsonl").read_text().splitlines()]
    final = checkpoints[-1]
    assert final["state_path"].endswith("/weights/final") and final["sampler_path"].endswith(
        "/sampler_weights/final"
    )
    assert (tinker_service.state_dir_for(final["state_path"]) / "tinker_model.json").is_file()
    assert tinker_service.samplers.has(final["sampler_path"])
