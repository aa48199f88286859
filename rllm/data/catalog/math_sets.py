"""Row transforms of the catalog's math benchmarks (graded by the ``math`` or ``countdown`` reward).

Each takes one row in the hub's column layout and returns ``question``, ``ground_truth`` (the final answer
as a string) and ``metadata``, plus ``task_id`` where the hub has an id. Questions are the problems as
published; how to format the answer (``\\boxed{}``) is for the prompt template to ask.
"""

from __future__ import annotations

from typing import Any

from rllm.rewards.countdown import countdown_prompt


def number_text(value: Any) -> str:
    """An answer as a string: ``142.0`` → ``"142"``, ``0.5`` → ``"0.5"``, strings stripped."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


def gsm8k(row: dict[str, Any]) -> dict[str, Any]:
    """openai/gsm8k: ``question``, ``answer`` (worked solution ending in ``#### 72``)."""
    solution = row["answer"]
    if "####" not in solution:
        raise ValueError("the answer has no '####' line with the final answer")
    final = solution.rsplit("####", 1)[1].strip().replace(",", "")
    return {"question": row["question"], "ground_truth": final, "metadata": {"solution": solution}}


def math500(row: dict[str, Any]) -> dict[str, Any]:
    """HuggingFaceH4/MATH-500: ``problem``, ``solution``, ``answer``, ``subject``, ``level``, ``unique_id``."""
    return {
        "task_id": row["unique_id"],
        "question": row["problem"],
        "ground_truth": row["answer"],
        "metadata": {"subject": row["subject"], "level": row["level"], "solution": row["solution"]},
    }


def aime2024(row: dict[str, Any]) -> dict[str, Any]:
    """HuggingFaceH4/aime_2024: ``id``, ``problem``, ``solution``, ``answer`` (a string), ``url``, ``year``."""
    return {
        "task_id": f"aime2024-{row['id']}",
        "question": row["problem"],
        "ground_truth": number_text(row["answer"]),
        "metadata": {"url": row.get("url"), "year": row.get("year"), "solution": row.get("solution")},
    }


def aime2025(row: dict[str, Any]) -> dict[str, Any]:
    """MathArena/aime_2025: ``problem_idx`` (1-30), ``problem``, ``answer`` (an integer), ``problem_type``."""
    return {
        "task_id": f"aime2025-{row['problem_idx']}",
        "question": row["problem"],
        "ground_truth": number_text(row["answer"]),
        "metadata": {"problem_type": list(row.get("problem_type") or [])},
    }


def amc(row: dict[str, Any]) -> dict[str, Any]:
    """AI-MO/aimo-validation-amc: ``id``, ``problem``, ``answer`` (a float such as 142.0), ``url``."""
    return {
        "task_id": f"amc-{row['id']}",
        "question": row["problem"],
        "ground_truth": number_text(row["answer"]),
        "metadata": {"url": row.get("url")},
    }


def countdown(row: dict[str, Any]) -> dict[str, Any]:
    """Jiayi-Pan/Countdown-Tasks-3to4: ``target`` (int), ``nums`` (list of int)."""
    target, numbers = int(row["target"]), [int(n) for n in row["nums"]]
    return {
        "question": countdown_prompt(numbers, target),
        "ground_truth": {"target": target, "numbers": numbers},
        "metadata": {},
    }


def finqa(row: dict[str, Any]) -> dict[str, Any]:
    """TheFinAI/flare-finqa: ``id``, ``query`` (instruction, report excerpt and table, question),
    ``answer`` (the number the gold program computes), ``text``."""
    return {
        "task_id": str(row["id"]),
        "question": row["query"],
        "ground_truth": number_text(row["answer"]),
        "metadata": {"text": row.get("text")},
    }
