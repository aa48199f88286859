"""Row transforms of the catalog's question-answering and multiple-choice benchmarks.

Multiple-choice questions list their options as ``A. ...`` lines and ask for the letter; the ground truth is
the correct letter and ``metadata["choices"]`` lists the options in letter order (what the
``multiple_choice`` reward reads).
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

LETTERS = "ABCDEFGHIJ"


def multiple_choice_question(question: str, choices: list[str]) -> str:
    options = "\n".join(f"{LETTERS[i]}. {choice}" for i, choice in enumerate(choices))
    return f"{question.strip()}\n\n{options}\n\nAnswer with the letter of the correct option."


def hotpotqa(row: dict[str, Any]) -> dict[str, Any]:
    """hotpotqa/hotpot_qa (distractor): ``id``, ``question``, ``answer``, ``type``, ``level``,
    ``supporting_facts`` ({"title": [...], "sent_id": [...]}), ``context`` ({"title": [...],
    "sentences": [[...], ...]}). The ten paragraphs (two with the facts, eight distractors) come before the
    question, as the distractor setting intends, and also go to ``metadata.context`` as {"title", "text"}."""
    context = row["context"]
    facts = row["supporting_facts"]
    paragraphs = "\n\n".join(
        f"{title}: {''.join(sentences)}" for title, sentences in zip(context["title"], context["sentences"])
    )
    return {
        "task_id": row["id"],
        "question": f"{paragraphs}\n\nQuestion: {row['question']}",
        "ground_truth": row["answer"],
        "metadata": {
            "type": row.get("type"),
            "level": row.get("level"),
            "context": [
                {"title": title, "text": "".join(sentences)}
                for title, sentences in zip(context["title"], context["sentences"])
            ],
            "supporting_facts": [[title, sent] for title, sent in zip(facts["title"], facts["sent_id"])],
        },
    }


def mmlu_pro(row: dict[str, Any]) -> dict[str, Any]:
    """TIGER-Lab/MMLU-Pro: ``question_id``, ``question``, ``options`` (up to 10), ``answer`` (the letter),
    ``answer_index``, ``cot_content``, ``category``, ``src``. "N/A" padding options are dropped and the
    letter recomputed."""
    options = list(row["options"])
    correct = int(row["answer_index"])
    keep = [i for i, option in enumerate(options) if option.strip() != "N/A" or i == correct]
    choices = [options[i] for i in keep]
    return {
        "task_id": f"mmlu-pro-{row['question_id']}",
        "question": multiple_choice_question(row["question"], choices),
        "ground_truth": LETTERS[keep.index(correct)],
        "metadata": {"choices": choices, "category": row.get("category"), "src": row.get("src")},
    }


def gpqa(row: dict[str, Any]) -> dict[str, Any]:
    """Idavidrein/gpqa (gpqa_diamond): ``Question``, ``Correct Answer``, ``Incorrect Answer 1``-``3``,
    ``Record ID``, ``High-level domain``, ``Subdomain``, ``Explanation`` (and more). The four options are
    shuffled with a seed taken from the record id, so every pull gives each question the same order."""
    key = row.get("Record ID") or row["Question"]
    rng = random.Random(hashlib.sha256(key.encode()).hexdigest())
    options = [
        row["Correct Answer"],
        row["Incorrect Answer 1"],
        row["Incorrect Answer 2"],
        row["Incorrect Answer 3"],
    ]
    order = list(range(4))
    rng.shuffle(order)
    choices = [options[i].strip() for i in order]
    return {
        "task_id": f"gpqa-diamond-{key}",
        "question": multiple_choice_question(row["Question"], choices),
        "ground_truth": LETTERS[order.index(0)],
        "metadata": {
            "choices": choices,
            "domain": row.get("High-level domain"),
            "subdomain": row.get("Subdomain"),
            "explanation": row.get("Explanation"),
        },
    }
