"""Agents: the side of a multi-turn episode that talks to the model (``Agent``, ``InvalidAction``)."""

from rllm.agents.base import Agent, InvalidAction

__all__ = ["Agent", "InvalidAction"]
