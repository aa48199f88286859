"""The agent-facing SDK: write an agent as ordinary code against an OpenAI-compatible base URL, and
rllm trains the model behind it.

- :func:`rollout` turns ``fn(task, config)`` (sync or async) into an agent flow; ``config`` is an
  :class:`AgentConfig` with the session's ``base_url``, ``model``, ``session_id`` and sampling settings.
- :func:`evaluator` turns ``fn(task, episode)`` into the flow's reward (a float, a bool, or an
  :class:`EvalResult` with named signals and per-role rewards).
- :class:`GatewayWorkflow` runs a flow under the workflow engine: one gateway session per episode, its
  traces assembled into token-faithful Steps, the evaluator's result as the reward.

The agent never imports the trainer: it sees a base URL and a model name.
"""

from rllm.sdk.decorators import AgentConfig, EvalResult, Evaluator, Rollout, evaluator, rollout

__all__ = ["AgentConfig", "EvalResult", "Evaluator", "GatewayWorkflow", "Rollout", "evaluator", "rollout"]


def __getattr__(name: str):  # GatewayWorkflow pulls in httpx and the engine: import on first use
    if name == "GatewayWorkflow":
        from rllm.sdk.workflow import GatewayWorkflow  # the engine and the gateway: agent code needs neither

        return GatewayWorkflow
    raise AttributeError(f"module 'rllm.sdk' has no attribute {name!r}")
