"""Environments for multi-turn agents: the interface (``Env``, ``EnvStep``), the registry that names them
(``register_env``, ``get_env``) and the built-in ones, which register themselves on import."""

from rllm.envs.base import Env, EnvStep
from rllm.envs.frozenlake import FrozenLakeAgent, FrozenLakeEnv, frozenlake_tasks, generate_map
from rllm.envs.registry import (
    ENVS,
    EnvOptions,
    EnvSpec,
    UnknownEnvError,
    env_names,
    get_env,
    is_env,
    register_env,
    unregister_env,
)
from rllm.envs.sokoban import SokobanAgent, SokobanEnv, sokoban_tasks

__all__ = [
    "ENVS",
    "Env",
    "EnvOptions",
    "EnvSpec",
    "EnvStep",
    "FrozenLakeAgent",
    "FrozenLakeEnv",
    "SokobanAgent",
    "SokobanEnv",
    "UnknownEnvError",
    "env_names",
    "frozenlake_tasks",
    "generate_map",
    "get_env",
    "is_env",
    "register_env",
    "sokoban_tasks",
    "unregister_env",
]
