"""FrozenLake as a text game: walk from S to G on a grid of ice without stepping into a hole.

Written here rather than wrapped from gymnasium so maps, splits and observations are ours to shape for a
small chat model. A map is a list of row strings over ``S`` (start), ``F`` (frozen, safe), ``H`` (hole)
and ``G`` (goal). Positions are ``(row, col)``, 0-indexed in code and 1-indexed in the text the model
reads. The episode earns 1.0 on reaching G and 0.0 otherwise (a hole, or running out of steps).

    env = FrozenLakeEnv(size=4, seed=7)
    observation, info = env.reset()
    result = env.step("right")        # or "Right", or 2 (gymnasium's LEFT=0, DOWN=1, RIGHT=2, UP=3)

``FrozenLakeAgent`` is the matching chat agent: the model answers each board with a direction.
"""

from __future__ import annotations

import hashlib
import numbers
import random
import re
from collections import deque
from typing import Any

from pydantic import Field

from rllm.agents.base import Agent, InvalidAction
from rllm.envs.base import Env, EnvStep
from rllm.envs.registry import EnvOptions, register_env

Position = tuple[int, int]

DIRECTIONS = ("up", "down", "left", "right")
# Gymnasium's action numbering, so integer policies written for gym.FrozenLake work unchanged.
GYM_ACTIONS = {0: "left", 1: "down", 2: "right", 3: "up"}
_MOVES: dict[str, Position] = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
# A slippery step goes the intended way or to either side of it, each with probability 1/3 (as in gym).
_VERTICAL, _HORIZONTAL = ("up", "down"), ("left", "right")
_SIDEWAYS = {"up": _HORIZONTAL, "down": _HORIZONTAL, "left": _VERTICAL, "right": _VERTICAL}

_MAX_MAP_ATTEMPTS = 10_000


# ---------------------------------------------------------------------------------------------- maps


def generate_map(size: int, p_frozen: float, seed: int) -> list[str]:
    """A random ``size`` x ``size`` map with a path from S to G, the same for the same arguments.

    S and G sit on two distinct random cells; every other cell is frozen with probability ``p_frozen``,
    else a hole. Maps without a path are redrawn from the same seeded stream until one has a path.
    """
    if size < 2:
        raise ValueError(f"size must be at least 2 (S and G need distinct cells), got {size}")
    if not 0.0 < p_frozen <= 1.0:
        raise ValueError(f"p_frozen must be in (0, 1], got {p_frozen}")
    rng = random.Random(seed)
    cells = [(r, c) for r in range(size) for c in range(size)]
    for _ in range(_MAX_MAP_ATTEMPTS):
        start, goal = rng.sample(cells, 2)
        rows = [["F" if rng.random() < p_frozen else "H" for _ in range(size)] for _ in range(size)]
        rows[start[0]][start[1]] = "S"
        rows[goal[0]][goal[1]] = "G"
        grid = ["".join(row) for row in rows]
        if shortest_path_length(grid) is not None:
            return grid
    raise ValueError(
        f"no solvable {size}x{size} map in {_MAX_MAP_ATTEMPTS} draws with p_frozen={p_frozen}; "
        "raise p_frozen or lower size"
    )


def _find(grid: list[str], char: str) -> Position:
    for r, row in enumerate(grid):
        c = row.find(char)
        if c >= 0:
            return (r, c)
    raise ValueError(f"map has no {char!r} cell")


def _step_from(grid: list[str], position: Position, direction: str) -> Position | None:
    """The cell one step ``direction`` from ``position``, or None at the edge of the map."""
    r, c = position[0] + _MOVES[direction][0], position[1] + _MOVES[direction][1]
    if 0 <= r < len(grid) and 0 <= c < len(grid[0]):
        return (r, c)
    return None


def _distances_to_goal(grid: list[str]) -> dict[Position, int]:
    """BFS from G over non-hole cells: steps from each reachable cell to the goal (moves are symmetric)."""
    goal = _find(grid, "G")
    distances = {goal: 0}
    queue = deque([goal])
    while queue:
        cell = queue.popleft()
        for direction in DIRECTIONS:
            nxt = _step_from(grid, cell, direction)
            if nxt is not None and nxt not in distances and grid[nxt[0]][nxt[1]] != "H":
                distances[nxt] = distances[cell] + 1
                queue.append(nxt)
    return distances


def shortest_path_length(grid: list[str]) -> int | None:
    """The fewest moves from S to G avoiding holes, or None when G cannot be reached."""
    return _distances_to_goal(grid).get(_find(grid, "S"))


def optimal_action(grid: list[str], position: Position) -> str:
    """The first move of a shortest path from ``position`` to G (ties broken up, down, left, right)."""
    distances = _distances_to_goal(grid)
    here = distances.get(tuple(position))
    if here is None or here == 0:
        raise ValueError(f"no move to make from {tuple(position)}: it is the goal or cannot reach it")
    for direction in DIRECTIONS:
        nxt = _step_from(grid, tuple(position), direction)
        if nxt is not None and distances.get(nxt) == here - 1:
            return direction
    raise AssertionError("BFS distances are inconsistent")  # unreachable: some neighbour is one closer


def _split_of(grid: list[str]) -> str:
    """Which split a map belongs to, decided by its content so no map can be in both (1 in 4 is test)."""
    digest = hashlib.sha256("\n".join(grid).encode()).digest()
    return "test" if digest[0] % 4 == 0 else "train"


def frozenlake_tasks(
    split: str, n: int, *, seed: int = 0, sizes: tuple[int, ...] = (3, 4), p_frozen: float = 0.8
) -> list[dict[str, Any]]:
    """``n`` distinct FrozenLake tasks for ``split`` ("train" or "test"), cycling through ``sizes``, as rows
    of the common task schema: the map in ``metadata`` (``grid``, ``size``, ``p_frozen``, ``seed``,
    ``shortest_path``), the map as text in ``question``, the fewest moves as ``ground_truth``.

    A map's split is a hash of the map itself, so a test map never appears in any train set, whatever
    ``seed`` or ``n``. ``seed`` picks which maps are drawn. ``shortest_path`` is the optimal episode length.
    """
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    if not sizes:
        raise ValueError("sizes must name at least one map size")
    rng = random.Random(f"frozenlake-tasks-{seed}")
    seen: set[tuple[str, ...]] = set()
    tasks = []
    for i in range(n):
        size = sizes[i % len(sizes)]
        for _ in range(_MAX_MAP_ATTEMPTS):
            map_seed = rng.getrandbits(31)
            grid = generate_map(size, p_frozen, map_seed)
            if _split_of(grid) == split and tuple(grid) not in seen:
                break
        else:
            raise ValueError(
                f"found only {sum(len(t) == size for t in seen)} distinct {size}x{size} {split} "
                f"maps; ask for fewer tasks or use larger sizes"
            )
        seen.add(tuple(grid))
        path = shortest_path_length(grid)
        tasks.append(
            {
                "task_id": f"frozenlake-{split}-{size}x{size}-{map_seed}",
                "question": "Walk from S to G on this FrozenLake map without stepping into a hole (H):\n"
                + "\n".join(grid),
                "ground_truth": path,  # the fewest moves; the environment gives the reward
                "data_source": "builtin/frozenlake",
                "metadata": {
                    "size": size,
                    "p_frozen": p_frozen,
                    "seed": map_seed,
                    "shortest_path": path,
                    "grid": grid,
                },
            }
        )
    return tasks


# ----------------------------------------------------------------------------------------------- env


def parse_action(action: Any) -> str:
    """A direction name from ``"up"``/``"UP"``/... or a gymnasium action number 0-3; else ValueError."""
    if isinstance(action, numbers.Integral) and not isinstance(action, bool):
        if int(action) in GYM_ACTIONS:
            return GYM_ACTIONS[int(action)]
    elif isinstance(action, str) and action.strip().lower() in _MOVES:
        return action.strip().lower()
    raise ValueError(
        f"FrozenLake action must be one of {DIRECTIONS} or an int 0-3 (LEFT, DOWN, RIGHT, UP), got {action!r}"
    )


class FrozenLakeEnv(Env):
    """One FrozenLake map. Each step moves the player one cell; the episode ends at G, in a hole, or
    after ``max_steps`` moves (``None``: no limit, the workflow's turn limit applies)."""

    def __init__(
        self,
        size: int = 4,
        p_frozen: float = 0.8,
        seed: int = 0,
        max_steps: int | None = None,
        is_slippery: bool = False,
        grid: list[str] | None = None,
    ) -> None:
        if grid is None:
            grid = generate_map(size, p_frozen, seed)
        else:
            grid = list(grid)
            if not grid or any(len(row) != len(grid[0]) for row in grid) or not grid[0]:
                raise ValueError("grid must be a non-empty list of equally long row strings")
            if set("".join(grid)) - set("SFHG"):
                raise ValueError(f"grid may only hold S, F, H, G; got {sorted(set(''.join(grid)))}")
            counts = {char: "".join(grid).count(char) for char in "SG"}
            if counts != {"S": 1, "G": 1}:
                raise ValueError(f"grid needs exactly one S and one G, got {counts}")
        if max_steps is not None and max_steps < 1:
            raise ValueError(f"max_steps must be positive or None, got {max_steps}")
        self.grid = grid
        self.seed = seed
        self.max_steps = max_steps
        self.is_slippery = is_slippery
        self.start = _find(grid, "S")
        self.goal = _find(grid, "G")
        self.position = self.start
        self.steps = 0
        self.done = False
        self._started = False
        self._slip_rng = random.Random(seed)

    @classmethod
    def from_task(cls, task: dict[str, Any]) -> FrozenLakeEnv:
        """Build from a task row: the map's ``grid`` (or ``size``, ``p_frozen``, ``seed``), and optional
        ``max_steps``, ``is_slippery``, read from ``task["metadata"]`` (as ``frozenlake_tasks`` writes them)
        or from the row itself (a hand-written task). A row naming no map is refused."""
        keys = ("size", "p_frozen", "seed", "max_steps", "is_slippery", "grid")
        source = {**task, **(task.get("metadata") or {})}
        kwargs = {key: source[key] for key in keys if key in source}
        if "grid" not in kwargs and "seed" not in kwargs:
            raise ValueError(
                f"task {task.get('task_id', '?')!r} names no map: give metadata.grid, or "
                "metadata.size/p_frozen/seed"
            )
        return cls(**kwargs)

    def reset(self) -> tuple[str, dict[str, Any]]:
        self.position = self.start
        self.steps = 0
        self.done = False
        self._started = True
        self._slip_rng = random.Random(self.seed)  # same slips for the same actions, every episode
        return self._observation("Find a safe path to the goal."), self._info(None)

    def step(self, action: Any) -> EnvStep:
        if not self._started:
            raise RuntimeError("call reset() before step()")
        if self.done:
            raise RuntimeError("the episode is over; call reset() to play again")
        intended = parse_action(action)
        direction = intended
        if self.is_slippery:
            direction = self._slip_rng.choice((intended, *_SIDEWAYS[intended]))
        self.steps += 1

        slip = f"You tried to move {intended} but slipped {direction}." if direction != intended else ""
        target = _step_from(self.grid, self.position, direction)
        if target is None:
            event = f"{slip} You hit the wall going {direction} and stayed in place.".lstrip()
        else:
            self.position = target
            event = slip or f"You moved {direction}."

        cell = self.grid[self.position[0]][self.position[1]]
        result, reward = None, 0.0
        if cell == "G":
            result, reward, event = "goal", 1.0, f"{event} You reached the goal!"
        elif cell == "H":
            result, event = "hole", f"{event} You fell into a hole. Game over."
        self.done = result is not None
        info = self._info(result)
        if not self.done and self.max_steps is not None and self.steps >= self.max_steps:
            self.done = True
            info["truncated"] = True
            event = f"{event} You are out of moves. Game over."
        return EnvStep(observation=self._observation(event), reward=reward, done=self.done, info=info)

    def _info(self, result: str | None) -> dict[str, Any]:
        return {"position": self.position, "result": result, "steps": self.steps, "success": result == "goal"}

    def render(self) -> str:
        """The grid as rows of space-separated cells, P marking the player (the start shows as F)."""
        cells = [[("F" if ch == "S" else ch) for ch in row] for row in self.grid]
        cells[self.position[0]][self.position[1]] = "P"
        return "\n".join(" ".join(row) for row in cells)

    def safe_moves(self) -> list[str]:
        """The directions that neither leave the map nor step into a hole, from where the player stands."""
        moves = []
        for direction in DIRECTIONS:
            target = _step_from(self.grid, self.position, direction)
            if target is not None and self.grid[target[0]][target[1]] != "H":
                moves.append(direction)
        return moves

    def _observation(self, event: str) -> str:
        (row, col), (goal_row, goal_col) = self.position, self.goal
        offset = _offset(goal_row - row, goal_col - col)
        goal = f"The goal is {offset}." if offset else "You are on the goal."
        return (
            f"{event}\n{self.render()}\nP = you, F = ice, H = hole, G = goal.\n"
            f"{goal} Safe moves: {', '.join(self.safe_moves()) or 'none'}."
        )


def _offset(rows: int, cols: int) -> str:
    """Where the goal lies from the player, in words ("2 down and 1 left"; "" on the goal).

    A 135M model cannot read a position off the grid or subtract row numbers, but it can learn which of
    the directions named here is also a safe move (the observation lists those too). Before training,
    SmolLM2-135M tends to echo this sentence, and its first direction word is read as the move.
    """
    parts = [
        f"{abs(n)} {word}"
        for n, word in ((rows, "down" if rows > 0 else "up"), (cols, "right" if cols > 0 else "left"))
        if n
    ]
    return " and ".join(parts)


# --------------------------------------------------------------------------------------------- agent

_FORMAT = "Which way do you move: up, down, left or right? Answer with one word."

# The reply's last "Action: <direction>" (markdown and brackets tolerated: **Action:** up, Action: <up>),
# else its first direction word. SmolLM2-135M rarely writes a fixed format before training ("The answer
# is left."), so the lenient reading gives it moves to learn from; "Action: up/down" names none.
_ACTION_RE = re.compile(r"\baction[\s*_`]*:[\s*_`\"'<\[]*(up|down|left|right)\b(?![/|])", re.IGNORECASE)
_WORD_RE = re.compile(r"(?<![/|])\b(up|down|left|right)\b(?![/|])", re.IGNORECASE)


def parse_reply(reply: str) -> str | None:
    """The direction a model reply names: its last ``Action: <direction>``, else its first direction
    word; None when it names none."""
    matches = _ACTION_RE.findall(reply)
    if matches:
        return matches[-1].lower()
    word = _WORD_RE.search(reply)
    return word.group(1).lower() if word else None


class FrozenLakeAgent(Agent):
    """Shows each board as a user turn, asking for a one-word move; reads the move with ``parse_reply``.

    ``history_turns`` is how many earlier exchanges (board, reply) stay in the conversation: ``None``
    keeps the whole game, ``0`` shows only the current board. The board is the whole state of the game,
    so ``0`` loses nothing the player needs, and each turn is then a short prompt of its own (its own
    training row) instead of a conversation re-read from the start. A reply with no move is answered with
    the error and the same board again.

    No system prompt: SmolLM2-135M follows a short question next to the board better than rules in a
    system message. The question is asked on every turn.
    """

    system_prompt = None

    def __init__(self, history_turns: int | None = None) -> None:
        super().__init__()
        if history_turns is not None and history_turns < 0:
            raise ValueError(f"history_turns must be >= 0 or None (the whole game), got {history_turns}")
        self.history_turns = history_turns
        self._board = ""

    def reset(self, task: dict[str, Any]) -> None:
        super().reset(task)
        self._board = ""

    def observe(self, observation: Any, reward: float, done: bool, info: dict[str, Any]) -> None:
        if info.get("invalid_action") and self.history_turns is not None:
            observation = f"{observation}\n{self._board}"  # the model no longer sees the board it answered
        else:
            self._board = observation
        self.messages.append({"role": "user", "content": f"{observation}\n{_FORMAT}"})
        if self.history_turns is not None:
            head = 1 if self.system_prompt else 0
            keep = 2 * self.history_turns + 1  # (user, assistant) pairs, then the new user turn
            self.messages[head:] = self.messages[head:][-keep:]

    def act(self, reply: str) -> str | InvalidAction:
        self.messages.append({"role": "assistant", "content": reply})
        direction = parse_reply(reply)
        if direction is None:
            return InvalidAction(f"No move found in your reply. {_FORMAT}")
        return direction


# ------------------------------------------------------------------------------------- registration


class FrozenLakeOptions(EnvOptions):
    """``workflow.*`` keys of a run with ``workflow.name=frozenlake`` (and ``rllm eval frozenlake``)."""

    history_turns: int | None = Field(
        None,
        ge=0,
        description="earlier (board, reply) exchanges kept in the prompt; "
        "null keeps the whole game, 0 shows only the current board.",
    )


def _frozenlake_family(split: str, n: int, seed: int) -> list[dict[str, Any]]:
    return frozenlake_tasks(split, n, seed=seed)


register_env(
    "frozenlake",
    env=FrozenLakeEnv,
    agent=lambda options: FrozenLakeAgent(history_turns=options.history_turns),
    tasks=_frozenlake_family,
    options=FrozenLakeOptions,
    description="FrozenLake maps for the multi-turn env, which gives the reward (generated)",
    default_size={"train": 500, "test": 100},
    eval_options={"max_turns": 5, "history_turns": 0},  # examples/frozenlake's
)
