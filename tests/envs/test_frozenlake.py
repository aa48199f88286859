"""FrozenLake: map generation, splits, env dynamics, and the agent's reply parsing."""

import numpy as np
import pytest

from rllm.agents import InvalidAction
from rllm.envs import FrozenLakeAgent, FrozenLakeEnv, frozenlake_tasks, generate_map
from rllm.envs.frozenlake import optimal_action, parse_reply, shortest_path_length

# A fixed 4x4 map (gymnasium's default layout): S at (0, 0), G at (3, 3), shortest path 6.
GYM_4X4 = ["SFFF", "FHFH", "FFFH", "HFFG"]


@pytest.mark.parametrize("size", range(2, 9))
def test_generated_maps_are_solvable_and_well_formed(size):
    for seed in range(40):
        grid = generate_map(size, 0.7, seed)
        assert len(grid) == size and all(len(row) == size for row in grid)
        text = "".join(grid)
        assert set(text) <= set("SFHG") and text.count("S") == 1 and text.count("G") == 1
        assert shortest_path_length(grid) >= 1


def test_generate_map_is_deterministic_per_seed():
    assert generate_map(5, 0.8, 123) == generate_map(5, 0.8, 123)
    assert len({tuple(generate_map(5, 0.8, seed)) for seed in range(20)}) > 15


def test_generate_map_rejects_bad_arguments():
    with pytest.raises(ValueError, match="size"):
        generate_map(1, 0.8, 0)
    with pytest.raises(ValueError, match="p_frozen"):
        generate_map(4, 0.0, 0)


def test_shortest_path_length():
    assert shortest_path_length(GYM_4X4) == 6
    assert shortest_path_length(["SH", "HG"]) is None


def test_tasks_train_and_test_are_disjoint_and_deterministic():
    train = frozenlake_tasks("train", 300)
    test = frozenlake_tasks("test", 100)
    assert frozenlake_tasks("test", 100) == test

    def grids(tasks):
        return {tuple(t["metadata"]["grid"]) for t in tasks}

    train_grids, test_grids = grids(train), grids(test)
    assert len(train_grids) == 300 and len(test_grids) == 100  # distinct within a split
    assert not train_grids & test_grids
    # A different seed draws other maps but keeps the split: its test maps are still never train maps.
    assert not grids(frozenlake_tasks("test", 100, seed=1)) & train_grids

    task = test[0]
    meta = task["metadata"]
    assert (
        task["data_source"] == "builtin/frozenlake" and meta["size"] == 3 and test[1]["metadata"]["size"] == 4
    )
    assert meta["grid"] == generate_map(meta["size"], meta["p_frozen"], meta["seed"])
    assert (
        task["ground_truth"]
        == meta["shortest_path"]
        == shortest_path_length(FrozenLakeEnv.from_task(task).grid)
    )
    with pytest.raises(ValueError, match="split"):
        frozenlake_tasks("val", 1)


def test_optimal_play_reaches_goal_in_shortest_path_steps():
    for task in frozenlake_tasks("train", 60, sizes=(2, 3, 4, 5, 6, 8)):
        env = FrozenLakeEnv.from_task(task)
        _, info = env.reset()
        total, steps, done = 0.0, 0, False
        while not done:
            result = env.step(optimal_action(env.grid, info["position"]))
            total, steps, done, info = total + result.reward, steps + 1, result.done, result.info
        assert (total, steps, info["result"], info["steps"]) == (1.0, task["ground_truth"], "goal", steps)
        assert info["position"] == env.goal


def test_wall_keeps_position():
    env = FrozenLakeEnv(grid=GYM_4X4)
    env.reset()
    for action in ("up", "left"):
        result = env.step(action)
        assert result.info["position"] == (0, 0) and result.reward == 0.0 and not result.done
        assert "You hit the wall" in result.observation
    assert result.info["steps"] == 2 and result.info["result"] is None


def test_hole_ends_episode_without_reward():
    env = FrozenLakeEnv(grid=GYM_4X4)
    env.reset()
    env.step("right")
    result = env.step("down")
    assert result.done and result.reward == 0.0
    assert result.info == {"position": (1, 1), "result": "hole", "steps": 2, "success": False}
    assert "hole" in result.observation
    with pytest.raises(RuntimeError, match="reset"):
        env.step("up")


def test_max_steps_truncates():
    env = FrozenLakeEnv(grid=GYM_4X4, max_steps=2)
    env.reset()
    assert not env.step("up").done
    result = env.step("up")
    assert result.done and result.reward == 0.0 and result.info["truncated"] and result.info["result"] is None


def test_actions_accept_case_and_gym_ints():
    center = ["FFF", "FSF", "FFG"]
    # gymnasium numbering: LEFT=0, DOWN=1, RIGHT=2, UP=3
    expected = {0: (1, 0), 1: (2, 1), 2: (1, 2), 3: (0, 1)}
    for action, position in expected.items():
        for form in (action, np.int64(action)):
            env = FrozenLakeEnv(grid=center)
            env.reset()
            assert env.step(form).info["position"] == position
    env = FrozenLakeEnv(grid=center)
    env.reset()
    assert env.step(" DOWN ").info["position"] == (2, 1)
    for bad in ("jump", 4, -1, True, None, "Action: up"):
        env = FrozenLakeEnv(grid=center)
        env.reset()
        with pytest.raises(ValueError, match="up"):
            env.step(bad)


def test_deterministic_by_default_and_slippery_reproducible_per_seed():
    big = ["S" + "F" * 7] + ["F" * 8] * 6 + ["F" * 7 + "G"]
    actions = ["right", "down"] * 6

    def trajectory(seed, slippery):
        env = FrozenLakeEnv(grid=big, seed=seed, is_slippery=slippery)
        env.reset()
        return [env.step(a).info["position"] for a in actions if not env.done]

    assert trajectory(0, False) == trajectory(1, False)
    slipped = trajectory(3, True)
    assert slipped == trajectory(3, True)
    assert slipped != trajectory(0, False)  # 12 moves without a slip has probability (1/3)^12
    assert any(trajectory(seed, True) != slipped for seed in range(4, 8))
    env = FrozenLakeEnv(grid=big, seed=3, is_slippery=True)
    env.reset()
    first = [env.step(a).info["position"] for a in actions[:4]]
    env.reset()
    assert [env.step(a).info["position"] for a in actions[:4]] == first  # reset replays the same slips


def test_observation_names_the_goal_direction_and_safe_moves():
    env = FrozenLakeEnv(grid=GYM_4X4)
    observation, info = env.reset()
    assert info == {"position": (0, 0), "result": None, "steps": 0, "success": False}
    assert "P F F F\nF H F H\nF F F H\nH F F G" in observation
    assert observation.endswith("The goal is 3 down and 3 right. Safe moves: down, right.")
    observation = env.step("down").observation  # (1, 0): a hole to the right, the wall to the left
    assert observation.startswith("You moved down.")
    assert observation.endswith("The goal is 2 down and 3 right. Safe moves: up, down.")
    env.step("down")
    env.step("right")
    observation = env.step("right").observation  # (2, 2): a hole to the right
    assert observation.endswith("The goal is 1 down and 1 right. Safe moves: up, down, left.")
    assert env.step("down").observation.endswith("The goal is 1 right. Safe moves: up, left, right.")
    final = env.step("right")
    assert final.done and final.observation.endswith("You are on the goal. Safe moves: left.")


def test_safe_moves_are_none_when_boxed_in():
    env = FrozenLakeEnv(grid=["SH", "HG"])
    assert env.reset()[0].endswith("The goal is 1 down and 1 right. Safe moves: none.")
    assert env.safe_moves() == []


def test_from_task_ignores_bookkeeping_keys():
    task = {"task_id": "x", "size": 5, "p_frozen": 0.8, "seed": 9, "data_source": "d", "shortest_path": 3}
    assert FrozenLakeEnv.from_task(task).grid == generate_map(5, 0.8, 9)
    assert FrozenLakeEnv.from_task({**task, "max_steps": 4}).max_steps == 4
    row = {
        "task_id": "y",
        "metadata": {"grid": ["SF", "HG"], "max_steps": 2},
    }  # the schema row's place for them
    env = FrozenLakeEnv.from_task(row)
    assert env.grid == ["SF", "HG"] and env.max_steps == 2
    with pytest.raises(ValueError, match="'z' names no map"):
        FrozenLakeEnv.from_task({"task_id": "z", "question": "?"})


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("Action: up", "up"),
        ("I should go down first.\nAction: DOWN", "down"),
        ("Action: left. No wait. Action: right", "right"),
        ("**Action:** Left", "left"),
        ("action:right.", "right"),
        ("Action: <up>", "up"),
        ("down", "down"),
        ("  Right.  ", "right"),
        ("I will go up and then left.", "up"),
        ("Action: up/down/left/right", None),
        ("Action: <move>", None),
        ("Action: upward", None),
        ("", None),
        ("The goal is down and to the right", "down"),
    ],
)
def test_parse_reply(reply, expected):
    assert parse_reply(reply) == expected


def test_agent_messages_and_actions():
    agent = FrozenLakeAgent()
    env = FrozenLakeEnv(grid=GYM_4X4)
    agent.reset({})
    observation, info = env.reset()
    agent.observe(observation, 0.0, False, info)
    assert [m["role"] for m in agent.messages] == ["user"]
    question = "Which way do you move: up, down, left or right? Answer with one word."
    assert agent.messages[0]["content"] == f"{observation}\n{question}"

    assert agent.act("Going right.\nAction: Right") == "right"
    invalid = agent.act("hmm")
    assert isinstance(invalid, InvalidAction) and question in invalid.message
    assert agent.messages[-1] == {"role": "assistant", "content": "hmm"}

    result = env.step("right")
    agent.observe(result.observation, result.reward, result.done, result.info)
    assert agent.messages[-1] == {"role": "user", "content": f"{result.observation}\n{question}"}
    agent.reset({})
    assert agent.messages == []


def test_agent_history_turns_keeps_the_last_exchanges():
    env = FrozenLakeEnv(grid=GYM_4X4)
    question = "Which way do you move: up, down, left or right? Answer with one word."
    full, none, one = FrozenLakeAgent(), FrozenLakeAgent(history_turns=0), FrozenLakeAgent(history_turns=1)
    observation, info = env.reset()
    boards = [observation]
    for agent in (full, none, one):
        agent.reset({})
        agent.observe(observation, 0.0, False, info)
    for move in ("down", "down"):
        for agent in (full, none, one):
            assert agent.act(move) == move
        result = env.step(move)
        boards.append(result.observation)
        for agent in (full, none, one):
            agent.observe(result.observation, result.reward, result.done, result.info)
    assert len(full.messages) == 5
    assert none.messages == [{"role": "user", "content": f"{boards[2]}\n{question}"}]
    assert one.messages == full.messages[-3:]
    assert one.messages[0]["content"] == f"{boards[1]}\n{question}"

    # A reply with no move: without the whole game in view, the error comes with the board again.
    invalid = none.act("hmm")
    none.observe(invalid.message, -0.1, False, {"invalid_action": True})
    assert none.messages == [{"role": "user", "content": f"{invalid.message}\n{boards[2]}\n{question}"}]
    invalid = full.act("hmm")
    full.observe(invalid.message, -0.1, False, {"invalid_action": True})
    assert full.messages[-1] == {"role": "user", "content": f"{invalid.message}\n{question}"}
    with pytest.raises(ValueError, match="history_turns"):
        FrozenLakeAgent(history_turns=-1)


def test_tasks_say_when_a_size_has_too_few_maps():
    with pytest.raises(ValueError, match="distinct 2x2 train maps"):
        frozenlake_tasks("train", 100, sizes=(2,))
