"""What each reward needs a reply to look like, said to the model after the question.

``rllm train`` (``data.instruction=auto``) and ``rllm eval``'s chat flow append the instruction of the
dataset's reward to each question, so the model is told the answer format the grader reads. Each reward
declares its own (``register_reward(..., instruction=...)``, ``rllm.rewards.registry``).
"""

from __future__ import annotations

from rllm.rewards.registry import reward_instruction


def answer_instruction(reward: str | None) -> str | None:
    """The instruction for ``reward`` (None for rewards whose tasks already say it, e.g. countdown)."""
    return reward_instruction(reward)


def with_instruction(question: str, instruction: str | None) -> str:
    """``question`` followed by ``instruction``, unless the question already contains it."""
    if not instruction or instruction in question:
        return question
    return f"{question}\n\n{instruction}"
