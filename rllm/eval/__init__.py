"""Evaluation: run a flow over a dataset against any model and report accuracy, pass@k and mean@k."""

from rllm.eval.flows import chat_flow, env_flow, reward_evaluator
from rllm.eval.passk import mean_pass_at_k, pass_at_k
from rllm.eval.runner import EvalSpec, EvalSummary, load_results, run_eval

__all__ = [
    "EvalSpec",
    "EvalSummary",
    "chat_flow",
    "env_flow",
    "load_results",
    "mean_pass_at_k",
    "pass_at_k",
    "reward_evaluator",
    "run_eval",
]
