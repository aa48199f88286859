"""The catalog's reasoning and knowledge benchmarks (mostly multiple choice): row transforms and entries.

Multiple-choice questions list their options as ``A. ...`` lines and ask for the letter; the ground truth is
the correct letter and ``metadata["choices"]`` lists the options in letter order (what the
``multiple_choice`` reward reads). Where the hub always puts the right option first (GPQA, SciQ,
TruthfulQA), the options are shuffled with a seed taken from the question, so every pull gives a question
the same order.
"""

from __future__ import annotations

import hashlib
import random
import re
from typing import Any

from rllm.data.catalog._entry import CatalogEntry
from rllm.rewards.countdown import countdown_prompt

LETTERS = "ABCDEFGHIJ"


def multiple_choice_question(question: str, choices: list[str]) -> str:
    options = "\n".join(f"{LETTERS[i]}. {choice}" for i, choice in enumerate(choices))
    return f"{question.strip()}\n\n{options}\n\nAnswer with the letter of the correct option."


def _choice_task(question: str, choices: list[str], correct: int, metadata: dict[str, Any]) -> dict[str, Any]:
    if not 0 <= correct < len(choices):
        raise ValueError(f"correct option {correct} is not one of the {len(choices)} options")
    return {
        "question": multiple_choice_question(question, choices),
        "ground_truth": LETTERS[correct],
        "metadata": {"choices": choices, **metadata},
    }


def _shuffled(key: str, correct: str, wrong: list[str]) -> tuple[list[str], int]:
    """The options in an order fixed by ``key`` (a stable id of the question), and where the correct one is."""
    rng = random.Random(hashlib.sha256(key.encode()).hexdigest())
    options = [correct.strip(), *(w.strip() for w in wrong)]
    order = list(range(len(options)))
    rng.shuffle(order)
    return [options[i] for i in order], order.index(0)


def mmlu(row: dict[str, Any]) -> dict[str, Any]:
    """cais/mmlu (all): ``question``, ``subject``, ``choices`` (4), ``answer`` (the index 0-3)."""
    return _choice_task(
        row["question"], list(row["choices"]), int(row["answer"]), {"subject": row.get("subject")}
    )


def mmlu_pro(row: dict[str, Any]) -> dict[str, Any]:
    """TIGER-Lab/MMLU-Pro: ``question_id``, ``question``, ``options`` (up to 10), ``answer`` (the letter),
    ``answer_index``, ``cot_content``, ``category``, ``src``. "N/A" padding options are dropped and the
    letter recomputed."""
    options = list(row["options"])
    correct = int(row["answer_index"])
    keep = [i for i, option in enumerate(options) if option.strip() != "N/A" or i == correct]
    task = _choice_task(
        row["question"],
        [options[i] for i in keep],
        keep.index(correct),
        {"category": row.get("category"), "src": row.get("src")},
    )
    return {"task_id": f"mmlu-pro-{row['question_id']}", **task}


def gpqa(row: dict[str, Any], name: str = "gpqa") -> dict[str, Any]:
    """Idavidrein/gpqa (gpqa_diamond, gpqa_main, gpqa_extended): ``Question``, ``Correct Answer``,
    ``Incorrect Answer 1``-``3``, ``Record ID``, ``High-level domain``, ``Subdomain``, ``Explanation`` (and
    more). The four options are shuffled with a seed taken from the record id; the task id is
    ``NAME-RECORD_ID``."""
    key = row.get("Record ID") or row["Question"]
    wrong = [row["Incorrect Answer 1"], row["Incorrect Answer 2"], row["Incorrect Answer 3"]]
    choices, correct = _shuffled(key, row["Correct Answer"], wrong)
    meta = {
        "domain": row.get("High-level domain"),
        "subdomain": row.get("Subdomain"),
        "explanation": row.get("Explanation"),
    }
    return {"task_id": f"{name}-{key}", **_choice_task(row["Question"], choices, correct, meta)}


def _labelled_choice(row: dict[str, Any], question: str, meta: dict[str, Any]) -> dict[str, Any]:
    """``choices`` = ``{"text": [...], "label": [...]}`` and ``answerKey`` one of the labels (ARC,
    CommonsenseQA, OpenBookQA). Labels may be digits ("1"-"4"); options are re-lettered A, B, ...."""
    labels = [str(label) for label in row["choices"]["label"]]
    return {
        "task_id": str(row["id"]),
        **_choice_task(question, list(row["choices"]["text"]), labels.index(str(row["answerKey"])), meta),
    }


def arc(row: dict[str, Any]) -> dict[str, Any]:
    """allenai/ai2_arc (ARC-Challenge, ARC-Easy): ``id``, ``question``, ``choices`` (``text``, ``label``),
    ``answerKey``."""
    return _labelled_choice(row, row["question"], {})


def commonsense_qa(row: dict[str, Any]) -> dict[str, Any]:
    """tau/commonsense_qa: ``id``, ``question``, ``question_concept``, ``choices`` (``label`` A-E, ``text``),
    ``answerKey``."""
    return _labelled_choice(row, row["question"], {"concept": row.get("question_concept")})


def openbookqa(row: dict[str, Any]) -> dict[str, Any]:
    """allenai/openbookqa (main): ``id``, ``question_stem``, ``choices`` (``text``, ``label``), ``answerKey``."""
    return _labelled_choice(row, row["question_stem"], {})


def hellaswag(row: dict[str, Any]) -> dict[str, Any]:
    """Rowan/hellaswag: ``ind``, ``activity_label``, ``ctx_a``, ``ctx_b``, ``ctx``, ``endings`` (4),
    ``source_id``, ``split``, ``split_type``, ``label`` (the right ending's index, as a string)."""
    question = f"Which ending continues the text best?\n\n{row['activity_label']}: {row['ctx']}"
    task = _choice_task(
        question, list(row["endings"]), int(row["label"]), {"activity": row.get("activity_label")}
    )
    return {"task_id": f"hellaswag-{row['ind']}", **task}


def winogrande(row: dict[str, Any]) -> dict[str, Any]:
    """allenai/winogrande (winogrande_xl): ``sentence`` (with a ``_`` blank), ``option1``, ``option2``,
    ``answer`` ("1" or "2")."""
    question = f"Which option fills the blank (_) best?\n\n{row['sentence']}"
    return _choice_task(question, [row["option1"], row["option2"]], int(row["answer"]) - 1, {})


def sciq(row: dict[str, Any]) -> dict[str, Any]:
    """allenai/sciq: ``question``, ``distractor1``-``3``, ``correct_answer``, ``support`` (a paragraph).
    The options are shuffled with a seed taken from the question."""
    wrong = [row["distractor1"], row["distractor2"], row["distractor3"]]
    choices, correct = _shuffled(row["question"], row["correct_answer"], wrong)
    return _choice_task(row["question"], choices, correct, {"support": row.get("support")})


def truthfulqa_mc1(row: dict[str, Any]) -> dict[str, Any]:
    """truthfulqa/truthful_qa (multiple_choice): ``question``, ``mc1_targets`` (``choices``, ``labels``: one
    1, always first on the hub), ``mc2_targets``. The MC1 options are shuffled with a seed from the question."""
    targets = row["mc1_targets"]
    right = [c for c, label in zip(targets["choices"], targets["labels"]) if label == 1]
    if len(right) != 1:
        raise ValueError(f"mc1_targets must mark exactly one option correct, marks {len(right)}")
    wrong = [c for c, label in zip(targets["choices"], targets["labels"]) if label != 1]
    choices, correct = _shuffled(row["question"], right[0], wrong)
    return _choice_task(row["question"], choices, correct, {})


def boolq(row: dict[str, Any]) -> dict[str, Any]:
    """google/boolq: ``question``, ``answer`` (bool), ``passage``. Ground truth "yes" or "no"."""
    return {
        "question": f"{row['passage'].strip()}\n\nQuestion: {row['question'].strip()}? Answer yes or no.",
        "ground_truth": "yes" if row["answer"] else "no",
        "metadata": {},
    }


_OPTION_TARGET = re.compile(r"^\(([A-R])\)$")


def bbh(row: dict[str, Any]) -> dict[str, Any]:
    """lukaemon/bbh (one config per task): ``input`` (the question, options included), ``target`` ("True",
    "valid", a date, or an option "(A)"). An option target becomes its letter, for ``multiple_choice``."""
    target = str(row["target"]).strip()
    option = _OPTION_TARGET.match(target)
    return {"question": row["input"], "ground_truth": option[1] if option else target, "metadata": {}}


def countdown(row: dict[str, Any]) -> dict[str, Any]:
    """Jiayi-Pan/Countdown-Tasks-3to4: ``target`` (int), ``nums`` (list of int)."""
    target, numbers = int(row["target"]), [int(n) for n in row["nums"]]
    return {
        "question": countdown_prompt(numbers, target),
        "ground_truth": {"target": target, "numbers": numbers},
        "metadata": {},
    }


def _gpqa(config: str, rows: int, what: str) -> CatalogEntry:
    name = f"gpqa-{config.removeprefix('gpqa_')}"
    return CatalogEntry(
        name,
        "Idavidrein/gpqa",
        config,
        {"test": "train"},
        lambda row: gpqa(row, name),
        "multiple_choice",
        f"{rows} graduate-level science questions ({what}), 4 options shuffled per question",
        "Gated on the hub: accept its terms and log in (`hf auth login`). The options are shuffled with a "
        "seed from the record id, so every pull gives a question the same order.",
        family="reasoning",
        size={"test": rows},
        license="cc-by-4.0",
    )


def _bbh(task: str, rows: int, what: str, reward: str) -> CatalogEntry:
    return CatalogEntry(
        f"bbh-{task.replace('_', '-')}",
        "lukaemon/bbh",
        task,
        {"test": "test"},
        bbh,
        reward,
        f"BIG-Bench Hard: {what}",
        "One entry per BBH task; the other BBH configs of the repository take the same transform.",
        family="reasoning",
        size={"test": rows},
    )


def _arc(config: str, sizes: tuple[int, int, int]) -> CatalogEntry:
    return CatalogEntry(
        config.lower(),
        "allenai/ai2_arc",
        config,
        {"train": "train", "validation": "validation", "test": "test"},
        arc,
        "multiple_choice",
        f"grade-school science questions, {config.split('-')[1].lower()} set (AI2 ARC)",
        family="reasoning",
        size=dict(zip(("train", "validation", "test"), sizes)),
        license="cc-by-sa-4.0",
    )


ENTRIES = (
    CatalogEntry(
        "mmlu",
        "cais/mmlu",
        "all",
        {"test": "test", "validation": "validation", "dev": "dev"},
        mmlu,
        "multiple_choice",
        "57 subjects of multiple-choice knowledge questions, 4 options (MMLU)",
        family="reasoning",
        size={"test": 14042, "validation": 1531, "dev": 285},
        license="mit",
    ),
    CatalogEntry(
        "mmlu-pro",
        "TIGER-Lab/MMLU-Pro",
        None,
        {"test": "test", "validation": "validation"},
        mmlu_pro,
        "multiple_choice",
        "12k multiple-choice questions, up to 10 options A-J",
        "`N/A` padding options are dropped and the letter recomputed.",
        family="reasoning",
        size={"test": 12032, "validation": 70},
        license="mit",
    ),
    _gpqa("gpqa_diamond", 198, "the diamond subset: both experts right, most non-experts wrong"),
    _gpqa("gpqa_main", 448, "the main set"),
    _gpqa("gpqa_extended", 546, "every question written"),
    _arc("ARC-Challenge", (1119, 299, 1172)),
    _arc("ARC-Easy", (2251, 570, 2376)),
    CatalogEntry(
        "commonsenseqa",
        "tau/commonsense_qa",
        None,
        {"train": "train", "test": "validation"},
        commonsense_qa,
        "multiple_choice",
        "commonsense questions with 5 options built from ConceptNet (CommonsenseQA)",
        "The hub's test split has no answers, so our test is its validation split.",
        family="reasoning",
        size={"train": 9741, "test": 1221},
        license="mit",
    ),
    CatalogEntry(
        "openbookqa",
        "allenai/openbookqa",
        "main",
        {"train": "train", "validation": "validation", "test": "test"},
        openbookqa,
        "multiple_choice",
        "elementary science questions that need a core fact plus common knowledge (OpenBookQA)",
        family="reasoning",
        size={"train": 4957, "validation": 500, "test": 500},
    ),
    CatalogEntry(
        "hellaswag",
        "Rowan/hellaswag",
        None,
        {"train": "train", "test": "validation"},
        hellaswag,
        "multiple_choice",
        "pick the most plausible continuation of an everyday scene, 4 endings (HellaSwag)",
        "The hub's test split has no labels, so our test is its validation split.",
        family="reasoning",
        size={"train": 39905, "test": 10042},
        license="mit",
    ),
    CatalogEntry(
        "winogrande",
        "allenai/winogrande",
        "winogrande_xl",
        {"train": "train", "test": "validation"},
        winogrande,
        "multiple_choice",
        "pronoun-resolution fill-in-the-blank with two options (WinoGrande XL)",
        "The hub's test split has no answers, so our test is its validation split.",
        family="reasoning",
        size={"train": 40398, "test": 1267},
    ),
    CatalogEntry(
        "sciq",
        "allenai/sciq",
        None,
        {"train": "train", "validation": "validation", "test": "test"},
        sciq,
        "multiple_choice",
        "crowd-sourced science exam questions with 4 options and a supporting paragraph (SciQ)",
        family="reasoning",
        size={"train": 11679, "validation": 1000, "test": 1000},
        license="cc-by-nc-3.0",
    ),
    CatalogEntry(
        "truthfulqa-mc1",
        "truthfulqa/truthful_qa",
        "multiple_choice",
        {"test": "validation"},
        truthfulqa_mc1,
        "multiple_choice",
        "817 questions that tempt imitative falsehoods, one true option (TruthfulQA MC1)",
        family="reasoning",
        size={"test": 817},
        license="apache-2.0",
    ),
    CatalogEntry(
        "boolq",
        "google/boolq",
        None,
        {"train": "train", "test": "validation"},
        boolq,
        "exact_match",
        "yes/no questions about a Wikipedia passage (BoolQ)",
        family="reasoning",
        size={"train": 9427, "test": 3270},
        license="cc-by-sa-3.0",
    ),
    _bbh("boolean_expressions", 250, "evaluate nested boolean expressions (True / False)", "exact_match"),
    _bbh("date_understanding", 250, "date arithmetic in words, 6 options", "multiple_choice"),
    _bbh(
        "logical_deduction_five_objects", 250, "order five objects from clues, 5 options", "multiple_choice"
    ),
    CatalogEntry(
        "countdown-3to4",
        "Jiayi-Pan/Countdown-Tasks-3to4",
        None,
        {"train": "train[:-1024]", "test": "train[-1024:]"},
        countdown,
        "countdown",
        "Countdown with 3-4 numbers (TinyZero's set; the last 1024 rows are held out as test)",
        "The generated built-in `countdown` needs no download.",
        family="reasoning",
        size={"train": 489340, "test": 1024},
    ),
)
