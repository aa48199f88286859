"""Sokoban: push rules, the solver, generated maps (solvable, split by content) and its registration."""

from __future__ import annotations

import pytest

from rllm.agents.base import InvalidAction
from rllm.data.registry import DatasetRegistry
from rllm.envs.registry import get_env
from rllm.envs.sokoban import SokobanAgent, SokobanEnv, generate_map, sokoban_tasks, solve

CORRIDOR = ["######", "#@$ .#", "######"]


def play(env: SokobanEnv, moves: list[str]) -> list:
    env.reset()
    return [env.step(move) for move in moves]


def test_pushing_a_box_onto_its_goal_solves_the_room() -> None:
    env = SokobanEnv(CORRIDOR)
    first, second = play(env, ["right", "right"])
    assert (first.reward, first.done) == (0.0, False) and "pushed a box right" in first.observation
    assert (second.reward, second.done, second.info["success"]) == (1.0, True, True)
    assert env.render().splitlines()[1] == "#  @*#"
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step("left")


def test_walls_and_boxes_block_and_boxes_cannot_be_pulled() -> None:
    env = SokobanEnv(["######", "#@$$.#", "#   .#", "######"])
    (blocked,) = play(env, ["right"])  # two boxes in a row: neither moves
    assert "cannot move" in blocked.observation and env.render().splitlines()[1] == "#@$$.#"
    wall, moved, back = play(env, ["up", "down", "up"])
    assert "wall" in wall.observation and env.render().splitlines()[1] == "#@$$.#"  # the box stayed
    assert moved.info["boxes_on_goals"] == back.info["boxes_on_goals"] == 0
    with pytest.raises(ValueError, match="must be one of"):
        env.step("jump")
    truncated = SokobanEnv(CORRIDOR, max_steps=1)
    (only,) = play(truncated, ["left"])
    assert only.done and only.info["truncated"] and only.reward == 0.0


def test_maps_are_checked() -> None:
    with pytest.raises(ValueError, match="as many boxes as goals"):
        SokobanEnv(["#####", "#@$ #", "#####"])
    with pytest.raises(ValueError, match="may only hold"):
        SokobanEnv(["#####", "#@$x#", "#####"])
    with pytest.raises(ValueError, match="names no map"):
        SokobanEnv.from_task({"task_id": "t", "metadata": {}})


def test_solver_counts_the_fewest_moves() -> None:
    assert solve(CORRIDOR) == 2
    assert solve(["######", "#@ $.#", "######"]) == 2
    assert solve(["#####", "#.$@#", "#####"]) == 1
    assert solve(["######", "#$  .#", "#@   #", "######"]) is None  # the box is in a corner


def test_generated_maps_are_solvable_deterministic_and_split_by_content() -> None:
    grid = generate_map(6, 1, seed=3)
    assert grid == generate_map(6, 1, seed=3) and len(grid) == 6
    assert solve(grid) is not None and solve(grid) > 0
    train, test = sokoban_tasks("train", 12, seed=0), sokoban_tasks("test", 6, seed=0)
    assert not {tuple(t["metadata"]["grid"]) for t in train} & {tuple(t["metadata"]["grid"]) for t in test}
    for task in train[:4]:
        env = SokobanEnv.from_task(task)
        assert task["ground_truth"] == solve(task["metadata"]["grid"]) == task["metadata"]["shortest_path"]
        env.reset()


def test_the_agent_reads_a_direction_and_keeps_only_the_current_board() -> None:
    agent = SokobanAgent()
    agent.reset({"task_id": "t"})
    env = SokobanEnv(CORRIDOR)
    observation, info = env.reset()
    agent.observe(observation, 0.0, False, info)
    assert len(agent.messages) == 1 and "#@$ .#" in agent.messages[0]["content"]
    assert agent.act("I push it. Right.") == "right"
    assert isinstance(agent.act("no idea"), InvalidAction)
    agent.observe("No move found.", 0.0, False, {"invalid_action": True})
    assert len(agent.messages) == 1 and "#@$ .#" in agent.messages[0]["content"]  # the board is repeated


def test_sokoban_registers_itself_as_an_environment_and_a_built_in_dataset() -> None:
    spec = get_env("sokoban")
    assert spec.make_options().max_turns == 20
    assert DatasetRegistry().info("sokoban").reward is None  # the environment scores itself
    rows = DatasetRegistry().load("sokoban", "test", limit=3)
    assert len(rows) == 3 and all(row["data_source"] == "builtin/sokoban" for row in rows)
