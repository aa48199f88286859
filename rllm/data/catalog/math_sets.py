"""The catalog's math benchmarks (graded by the ``math`` reward): their row transforms and entries.

Each takes one row in the hub's column layout and returns ``question``, ``ground_truth`` (the final answer
as a string) and ``metadata``, plus ``task_id`` where the hub has an id. Questions are the problems as
published; how to format the answer (``\\boxed{}``) is for the prompt template to ask.
"""

from __future__ import annotations

import re
from typing import Any

from rllm.data.catalog._entry import CatalogEntry


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


def last_boxed(text: str) -> str | None:
    """The contents of the last ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``, braces matched; None if none."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    open_at = text.index("{", start)
    depth = 0
    for i in range(open_at, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[open_at + 1 : i].strip()
    return None


def _boxed_answer(solution: str) -> str:
    answer = last_boxed(solution)
    if not answer:
        raise ValueError("the solution has no \\boxed{} final answer")
    return answer


def math_lighteval(row: dict[str, Any]) -> dict[str, Any]:
    """DigitalLearningGmbH/MATH-lighteval: ``problem``, ``level``, ``type``, ``solution`` (the final answer
    in its last ``\\boxed{}``)."""
    return {
        "question": row["problem"],
        "ground_truth": _boxed_answer(row["solution"]),
        "metadata": {"level": row.get("level"), "type": row.get("type"), "solution": row["solution"]},
    }


def numina_cot(row: dict[str, Any]) -> dict[str, Any] | None:
    """AI-MO/NuminaMath-CoT: ``source``, ``problem``, ``solution``, ``messages``. Rows whose solution boxes no
    final answer (proofs) are skipped."""
    answer = last_boxed(row["solution"])
    if not answer:
        return None
    return {
        "question": row["problem"],
        "ground_truth": answer,
        "metadata": {"source": row.get("source"), "solution": row["solution"]},
    }


def _dollars(text: str) -> str:
    return text.strip().removeprefix("$").removesuffix("$").strip()


def olympiadbench(row: dict[str, Any]) -> dict[str, Any]:
    """Hothan/OlympiadBench (OE_TO_maths_en_COMP): ``id``, ``question``, ``solution`` (list), ``final_answer``
    (list of ``$...$`` strings), ``context``, ``is_multiple_answer``, ``unit``, ``answer_type``, ``subfield``,
    ``difficulty`` (and image columns, empty in the text-only configs). Several final answers are joined
    with ", ", as the benchmark asks for all of them."""
    answers = [_dollars(a) for a in row["final_answer"] if a and a.strip()]
    if not answers:
        raise ValueError("final_answer is empty")
    question = row["question"] if not row.get("context") else f"{row['context']}\n\n{row['question']}"
    return {
        "task_id": f"olympiadbench-{row['id']}",
        "question": question,
        "ground_truth": ", ".join(answers),
        "metadata": {
            "unit": row.get("unit"),
            "answer_type": row.get("answer_type"),
            "subfield": row.get("subfield"),
            "is_multiple_answer": bool(row.get("is_multiple_answer")),
            "solution": list(row.get("solution") or []),
        },
    }


def question_answer(row: dict[str, Any]) -> dict[str, Any]:
    """Sets with plain ``question`` and ``answer`` columns (math-ai/minervamath)."""
    return {"question": row["question"], "ground_truth": number_text(row["answer"]), "metadata": {}}


def problem_answer(row: dict[str, Any]) -> dict[str, Any]:
    """Sets with ``problem``, ``answer`` and optionally ``solution``, ``source``, ``domain``, ``difficulty``
    (DeepScaleR, Omni-MATH)."""
    meta = {key: row[key] for key in ("solution", "source", "difficulty") if row.get(key) is not None}
    if row.get("domain") is not None:
        meta["domain"] = list(row["domain"])
    return {"question": row["problem"], "ground_truth": number_text(row["answer"]), "metadata": meta}


_NO_ANSWER = {"", "proof", "notfound", "none"}


def openr1_math(row: dict[str, Any]) -> dict[str, Any] | None:
    """open-r1/OpenR1-Math-220k (default): ``problem``, ``solution``, ``answer``, ``problem_type``,
    ``question_type``, ``source``, ``uuid`` (and the generations). Proof problems (answer "proof") are
    skipped."""
    answer = str(row.get("answer") or "").strip()
    if answer.lower() in _NO_ANSWER:
        return None
    return {
        "task_id": f"openr1-math-{row['uuid']}",
        "question": row["problem"],
        "ground_truth": answer,
        "metadata": {
            "problem_type": row.get("problem_type"),
            "question_type": row.get("question_type"),
            "source": row.get("source"),
        },
    }


_DAPO_WRAPPER = re.compile(
    r"^Solve the following math problem.*?\n\n(?P<problem>.*?)\n\nRemember to put", re.DOTALL
)


def dapo_math(row: dict[str, Any]) -> dict[str, Any]:
    """BytedTsinghua-SIA/DAPO-Math-17k: ``data_source``, ``prompt`` (one user message: DAPO's "Answer:"
    instructions around the problem), ``ability``, ``reward_model`` (``ground_truth``, ``style``),
    ``extra_info`` (``index``). The question is the problem without DAPO's instructions."""
    content = row["prompt"][0]["content"]
    match = _DAPO_WRAPPER.match(content)
    return {
        "task_id": f"dapo-{row['extra_info']['index']}",
        "question": match["problem"].strip() if match else content,
        "ground_truth": number_text(row["reward_model"]["ground_truth"]),
        "metadata": {"data_source": row.get("data_source")},
    }


def aime_1983_2024(row: dict[str, Any]) -> dict[str, Any]:
    """di-zhang-fdu/AIME_1983_2024: ``ID`` ("1983-1"), ``Year``, ``Problem Number``, ``Question``,
    ``Answer``, ``Part``."""
    return {
        "task_id": f"aime-{row['ID']}",
        "question": row["Question"],
        "ground_truth": number_text(row["Answer"]),
        "metadata": {
            "year": row.get("Year"),
            "problem_number": row.get("Problem Number"),
            "part": row.get("Part"),
        },
    }


def svamp(row: dict[str, Any]) -> dict[str, Any]:
    """ChilleD/SVAMP: ``ID``, ``Body``, ``Question``, ``Equation``, ``Answer`` (a float), ``Type``,
    ``question_concat``."""
    return {
        "task_id": f"svamp-{row['ID']}",
        "question": f"{row['Body'].strip()} {row['Question'].strip()}",
        "ground_truth": number_text(row["Answer"]),
        "metadata": {"equation": row.get("Equation"), "type": row.get("Type")},
    }


ENTRIES = (
    CatalogEntry(
        "gsm8k",
        "openai/gsm8k",
        "main",
        {"train": "train", "test": "test"},
        gsm8k,
        "math",
        "grade-school math word problems",
        "Ground truth: the number after `####`, commas dropped; the worked solution is `metadata.solution`.",
        size={"train": 7473, "test": 1319},
        license="mit",
    ),
    CatalogEntry(
        "math500",
        "HuggingFaceH4/MATH-500",
        None,
        {"test": "test"},
        math500,
        "math",
        "500 competition problems from the MATH test set (PRM800K subset)",
        "`task_id` is the hub's `unique_id`; subject, level and solution are in metadata.",
        size={"test": 500},
    ),
    CatalogEntry(
        "math",
        "DigitalLearningGmbH/MATH-lighteval",
        "default",
        {"train": "train", "test": "test"},
        math_lighteval,
        "math",
        "the MATH competition set (Hendrycks et al.), all seven subjects; answer from the solution's last \\boxed{}",
        "A parquet copy of hendrycks/competition_math, which was taken down.",
        size={"train": 7500, "test": 5000},
        license="mit",
    ),
    CatalogEntry(
        "aime2024",
        "HuggingFaceH4/aime_2024",
        None,
        {"test": "train"},
        aime2024,
        "math",
        "the 30 problems of AIME 2024 I and II (integer answers)",
        size={"test": 30},
    ),
    CatalogEntry(
        "aime2025",
        "MathArena/aime_2025",
        None,
        {"test": "train"},
        aime2025,
        "math",
        "the 30 problems of AIME 2025 I and II, as used by MathArena (integer answers)",
        size={"test": 30},
        license="cc-by-nc-sa-4.0",
    ),
    CatalogEntry(
        "aime-1983-2024",
        "di-zhang-fdu/AIME_1983_2024",
        None,
        {"train": "train"},
        aime_1983_2024,
        "math",
        "every AIME problem from 1983 to 2024 (integer answers); overlaps aime2024",
        size={"train": 933},
    ),
    CatalogEntry(
        "hmmt-feb-2025",
        "MathArena/hmmt_feb_2025",
        None,
        {"test": "train"},
        aime2025,  # MathArena's layout: problem_idx, problem, answer, problem_type
        "math",
        "the 30 problems of HMMT February 2025, as used by MathArena (answers are LaTeX expressions)",
        size={"test": 30},
        license="cc-by-nc-sa-4.0",
    ),
    CatalogEntry(
        "amc",
        "AI-MO/aimo-validation-amc",
        None,
        {"test": "train"},
        amc,
        "math",
        "83 AMC 12 problems from 2022-2023 with numeric answers (Numina's validation set)",
        "Float answers are written as integers where whole (`27.0` becomes `27`).",
        size={"test": 83},
    ),
    CatalogEntry(
        "olympiadbench",
        "Hothan/OlympiadBench",
        "OE_TO_maths_en_COMP",
        {"test": "train"},
        olympiadbench,
        "math",
        "olympiad math problems with open-ended answers, English, text only (OlympiadBench)",
        "Other configs of the repository hold physics, Chinese and multimodal problems.",
        size={"test": 674},
        license="apache-2.0",
    ),
    CatalogEntry(
        "minerva-math",
        "math-ai/minervamath",
        None,
        {"test": "test"},
        question_answer,
        "math",
        "272 undergraduate STEM problems of Minerva's OCWCourses set (answers may carry units)",
        size={"test": 272},
    ),
    CatalogEntry(
        "omni-math",
        "KbsdJames/Omni-MATH",
        None,
        {"test": "test"},
        problem_answer,
        "math",
        "4.4k olympiad-level problems in 33 sub-domains with difficulty ratings (Omni-MATH)",
        "Omni-MATH grades with a model judge (Omni-Judge); the `math` reward's symbolic check is stricter.",
        size={"test": 4428},
        license="apache-2.0",
    ),
    CatalogEntry(
        "deepscaler",
        "agentica-org/DeepScaleR-Preview-Dataset",
        None,
        {"train": "train"},
        problem_answer,
        "math",
        "40k AIME, AMC, Omni-MATH and STILL problems with answers, DeepScaleR's RL training set",
        size={"train": 40315},
        license="mit",
    ),
    CatalogEntry(
        "dapo-math-17k",
        "BytedTsinghua-SIA/DAPO-Math-17k",
        None,
        {"train": "train"},
        dapo_math,
        "math",
        "17k competition problems with integer answers, DAPO's RL training set",
        "Each problem appears about 100 times on the hub (1.79M rows, 17.9k distinct); DAPO's answer-format "
        "instructions are stripped from the question.",
        size={"train": 1791700},
        license="apache-2.0",
    ),
    CatalogEntry(
        "numina-math-cot",
        "AI-MO/NuminaMath-CoT",
        None,
        {"train": "train", "test": "test"},
        numina_cot,
        "math",
        "860k competition and textbook problems with worked solutions; answer from the last \\boxed{}",
        "Rows whose solution boxes no answer (proofs) are skipped at pull time.",
        size={"train": 859494, "test": 100},
        license="apache-2.0",
    ),
    CatalogEntry(
        "openr1-math-220k",
        "open-r1/OpenR1-Math-220k",
        "default",
        {"train": "train"},
        openr1_math,
        "math",
        "94k NuminaMath 1.5 problems with verified answers (the default split of OpenR1-Math-220k)",
        "Proof problems (answer `proof`) are skipped at pull time.",
        size={"train": 93733},
        license="apache-2.0",
    ),
    CatalogEntry(
        "svamp",
        "ChilleD/SVAMP",
        None,
        {"train": "train", "test": "test"},
        svamp,
        "math",
        "1k one-step arithmetic word problems with varied structure (SVAMP)",
        size={"train": 700, "test": 300},
    ),
)
