"""Training: ``AgentTrainer`` runs the loop (rollout, prepare the batch, update, sync weights, log) over a
training backend, configured by one typed ``TrainConfig`` (``rllm train``); ``SFTTrainer`` fine-tunes on
conversations over the same backends (``SFTConfig``, ``rllm sft``).

Names resolve on first use: ``import rllm.trainer`` loads nothing; ``AgentTrainer`` loads torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rllm._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "AgentTrainer": "rllm.trainer.agent_trainer",
    "StaleSamplesError": "rllm.trainer.agent_trainer",
    "TrainResult": "rllm.trainer.agent_trainer",
    "TrainConfig": "rllm.trainer.config",
    "check_config": "rllm.trainer.checks",
    "SFTConfig": "rllm.trainer.sft_config",
    "SFTResult": "rllm.trainer.sft",
    "SFTTrainer": "rllm.trainer.sft",
    "VLLMPoolEngine": "rllm.trainer.vllm_pool",
}

__all__ = [
    "AgentTrainer",
    "SFTConfig",
    "SFTResult",
    "SFTTrainer",
    "StaleSamplesError",
    "TrainConfig",
    "TrainResult",
    "VLLMPoolEngine",
    "check_config",
]

if TYPE_CHECKING:
    from rllm.trainer.agent_trainer import AgentTrainer, StaleSamplesError, TrainResult
    from rllm.trainer.checks import check_config
    from rllm.trainer.config import TrainConfig
    from rllm.trainer.sft import SFTResult, SFTTrainer
    from rllm.trainer.sft_config import SFTConfig
    from rllm.trainer.vllm_pool import VLLMPoolEngine

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
