"""Environments for multi-turn agents: the interface (``Env``, ``EnvStep``) and built-in ones."""

from rllm.envs.base import Env, EnvStep
from rllm.envs.frozenlake import FrozenLakeAgent, FrozenLakeEnv, frozenlake_tasks, generate_map

__all__ = ["Env", "EnvStep", "FrozenLakeAgent", "FrozenLakeEnv", "frozenlake_tasks", "generate_map"]
