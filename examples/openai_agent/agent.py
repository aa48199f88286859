"""An ordinary agent: the official `openai` client, one chat call, no rllm import.

This is the code a researcher already has. `train.py` trains the model behind it without changing a line:
it only hands the agent a client whose base URL is an rllm gateway session.
"""

from __future__ import annotations

import openai


async def answer(client: openai.AsyncOpenAI, model: str, question: str) -> str:
    """Ask the model one question and return its reply."""
    response = await client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": question}],
        max_tokens=32,
        temperature=0.7,  # the agent's own choice; during training the session's sampling settings win
    )
    return response.choices[0].message.content or ""
