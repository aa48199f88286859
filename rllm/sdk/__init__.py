"""The agent-facing SDK: write an agent as ordinary code against an OpenAI-compatible base URL, and
rllm trains the model behind it.

- :func:`rollout` turns ``fn(task, config)`` (sync or async) into an agent flow; ``config`` is an
  :class:`AgentConfig` with the session's ``base_url``, ``model``, ``session_id`` and sampling settings.
- :func:`evaluator` turns ``fn(task, episode)`` into the flow's reward (a float, a bool, or an
  :class:`~rllm.types.Outcome` with named signals and per-role rewards).
- :class:`GatewayWorkflow` runs a flow under the workflow runner: one gateway session per episode, its
  traces assembled into token-faithful Steps, the evaluator's result as the reward.

The agent never imports the trainer: it sees a base URL and a model name.
"""

from typing import TYPE_CHECKING

from rllm._lazy import lazy_exports
from rllm.sdk.decorators import AgentConfig, Evaluator, Rollout, evaluator, rollout

if TYPE_CHECKING:
    from rllm.sdk.workflow import GatewayWorkflow

__all__ = ["AgentConfig", "Evaluator", "GatewayWorkflow", "Rollout", "evaluator", "rollout"]


# GatewayWorkflow pulls in the engine and the gateway's trace store: imported on first use
__getattr__, __dir__ = lazy_exports(__name__, {"GatewayWorkflow": "rllm.sdk.workflow"})
