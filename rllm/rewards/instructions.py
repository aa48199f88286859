"""What each reward needs a reply to look like, said to the model after the question.

``rllm train`` (``data.instruction=auto``) and ``rllm eval``'s chat flow append the instruction of the
dataset's reward to each question, so the model is told the answer format the grader reads.
"""

from __future__ import annotations

ANSWER_INSTRUCTIONS: dict[str, str] = {
    "math": "Please reason step by step, and put your final answer within \\boxed{}.",
    "code": "Write your solution as a complete Python program in one ```python code block.",
    "multiple_choice": "Answer with the letter of the correct option.",
    "exact_match": "End your reply with a line 'Answer: <short answer>'.",
    "f1": "End your reply with a line 'Answer: <short answer>'.",
}


def answer_instruction(reward: str | None) -> str | None:
    """The instruction for ``reward`` (None for rewards whose tasks already say it, e.g. countdown)."""
    return ANSWER_INSTRUCTIONS.get(reward or "")


def with_instruction(question: str, instruction: str | None) -> str:
    """``question`` followed by ``instruction``, unless the question already contains it."""
    if not instruction or instruction in question:
        return question
    return f"{question}\n\n{instruction}"
