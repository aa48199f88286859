"""The catalog's question-answering and search benchmarks: their row transforms and entries.

Ground truths are the reference answer, or the list of its aliases (any one may match), graded by
``exact_match`` (short factoid answers) or ``f1`` (spans of a passage, as in SQuAD and HotpotQA).
"""

from __future__ import annotations

import json
from typing import Any

from rllm.data.catalog._entry import CatalogEntry


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


def _aliases(values: Any) -> list[str]:
    """Distinct non-empty answers, in order (a task's ground truth when any alias may match)."""
    seen: dict[str, None] = {}
    for value in values:
        text = str(value).strip()
        if text:
            seen.setdefault(text, None)
    if not seen:
        raise ValueError("the row has no reference answer")
    return list(seen)


def nq_open(row: dict[str, Any]) -> dict[str, Any]:
    """google-research-datasets/nq_open: ``question``, ``answer`` (a list of accepted answers)."""
    return {"question": row["question"], "ground_truth": _aliases(row["answer"]), "metadata": {}}


def triviaqa(row: dict[str, Any]) -> dict[str, Any]:
    """mandarjoshi/trivia_qa (rc.nocontext): ``question``, ``question_id``, ``question_source``,
    ``entity_pages``, ``search_results``, ``answer`` (``value``, ``aliases``, ``normalized_aliases``, ...)."""
    answer = row["answer"]
    return {
        "task_id": f"triviaqa-{row['question_id']}",
        "question": row["question"],
        "ground_truth": _aliases([answer["value"], *answer.get("aliases", [])]),
        "metadata": {"question_source": row.get("question_source")},
    }


def flashrag(row: dict[str, Any]) -> dict[str, Any]:
    """RUC-NLPIR/FlashRAG_datasets (every config): ``id``, ``question``, ``golden_answers`` (list),
    ``metadata`` (varies by config; not kept)."""
    return {
        "task_id": str(row["id"]),
        "question": row["question"],
        "ground_truth": _aliases(row["golden_answers"]),
        "metadata": {},
    }


def popqa(row: dict[str, Any]) -> dict[str, Any]:
    """akariasai/PopQA: ``id``, ``subj``, ``prop``, ``obj``, ``question``, ``possible_answers`` (a JSON list
    as a string), ``s_pop`` (subject popularity), ``o_aliases``, ... ."""
    return {
        "task_id": f"popqa-{row['id']}",
        "question": row["question"],
        "ground_truth": _aliases(json.loads(row["possible_answers"])),
        "metadata": {
            "prop": row.get("prop"),
            "subject": row.get("subj"),
            "subject_popularity": row.get("s_pop"),
        },
    }


def simpleqa(row: dict[str, Any]) -> dict[str, Any]:
    """basicv8vc/SimpleQA: ``metadata`` (a Python-literal string with topic, answer type, urls), ``problem``,
    ``answer``."""
    return {
        "question": row["problem"],
        "ground_truth": str(row["answer"]).strip(),
        "metadata": {"about": row.get("metadata")},
    }


def squad(row: dict[str, Any]) -> dict[str, Any]:
    """rajpurkar/squad: ``id``, ``title``, ``context``, ``question``, ``answers`` (``text``,
    ``answer_start``). The passage comes before the question."""
    return {
        "task_id": row["id"],
        "question": f"{row['context'].strip()}\n\nQuestion: {row['question'].strip()}",
        "ground_truth": _aliases(row["answers"]["text"]),
        "metadata": {"title": row.get("title")},
    }


def web_questions(row: dict[str, Any]) -> dict[str, Any]:
    """Stanford/web_questions: ``url`` (the Freebase page), ``question``, ``answers`` (list)."""
    return {
        "question": row["question"],
        "ground_truth": _aliases(row["answers"]),
        "metadata": {"url": row.get("url")},
    }


def drop(row: dict[str, Any]) -> dict[str, Any]:
    """ucinlp/drop: ``section_id``, ``query_id``, ``passage``, ``question``, ``answers_spans`` (``spans``,
    ``types``). A multi-span answer is one reference, its spans joined with ", "."""
    spans = [s.strip() for s in row["answers_spans"]["spans"] if s.strip()]
    if not spans:
        raise ValueError("answers_spans has no span")
    return {
        "task_id": f"drop-{row['query_id']}",
        "question": f"{row['passage'].strip()}\n\nQuestion: {row['question'].strip()}",
        "ground_truth": ", ".join(spans),
        "metadata": {
            "types": list(row["answers_spans"].get("types") or []),
            "section_id": row.get("section_id"),
        },
    }


_FLASHRAG = "RUC-NLPIR/FlashRAG_datasets"
_FLASHRAG_NOTE = (
    "FlashRAG's copy (the collection Search-R1 trains on); its licence is the collection's. "
    "Split sizes are not on its card."
)

ENTRIES = (
    CatalogEntry(
        "hotpotqa",
        "hotpotqa/hotpot_qa",
        "distractor",
        {"train": "train", "test": "validation"},
        hotpotqa,
        "f1",
        "multi-hop Wikipedia questions; the 10 distractor paragraphs are in metadata.context",
        'The ten paragraphs ("Title: text") come before "Question: ..." and are also in `metadata.context`; '
        "train is about 600 MB to download.",
        family="qa",
        size={"train": 90447, "test": 7405},
        license="cc-by-sa-4.0",
    ),
    CatalogEntry(
        "nq-open",
        "google-research-datasets/nq_open",
        "nq_open",
        {"train": "train", "test": "validation"},
        nq_open,
        "exact_match",
        "Natural Questions, open-domain (question and short answers, no passage)",
        family="qa",
        size={"train": 87925, "test": 3610},
        license="cc-by-sa-3.0",
    ),
    CatalogEntry(
        "triviaqa",
        "mandarjoshi/trivia_qa",
        "rc.nocontext",
        {"train": "train", "test": "validation"},
        triviaqa,
        "exact_match",
        "trivia questions with answer aliases, without evidence documents",
        "The hub's test split has no answers, so our test is its validation split.",
        family="qa",
        size={"train": 138384, "test": 17944},
    ),
    CatalogEntry(
        "popqa",
        "akariasai/PopQA",
        None,
        {"test": "test"},
        popqa,
        "exact_match",
        "14k entity questions from Wikidata, from popular to long-tail subjects",
        family="qa",
        size={"test": 14267},
    ),
    CatalogEntry(
        "simpleqa",
        "basicv8vc/SimpleQA",
        None,
        {"test": "test"},
        simpleqa,
        "exact_match",
        "4.3k short fact-seeking questions with one indisputable answer (OpenAI's SimpleQA)",
        "OpenAI grades SimpleQA with a model judge; `exact_match` is stricter (a paraphrase fails).",
        family="qa",
        size={"test": 4326},
    ),
    CatalogEntry(
        "squad",
        "rajpurkar/squad",
        "plain_text",
        {"train": "train", "test": "validation"},
        squad,
        "f1",
        "reading comprehension: an answer span of a Wikipedia paragraph (SQuAD 1.1)",
        family="qa",
        size={"train": 87599, "test": 10570},
        license="cc-by-sa-4.0",
    ),
    CatalogEntry(
        "web-questions",
        "Stanford/web_questions",
        None,
        {"train": "train", "test": "test"},
        web_questions,
        "exact_match",
        "questions from Google Suggest answered with Freebase entities (WebQuestions)",
        family="qa",
        size={"train": 3778, "test": 2032},
    ),
    CatalogEntry(
        "drop",
        "ucinlp/drop",
        None,
        {"train": "train", "test": "validation"},
        drop,
        "f1",
        "discrete reasoning (counting, sorting, arithmetic) over paragraphs (DROP)",
        "DROP's own metric aligns multi-span answers span by span; here they are one joined reference.",
        family="qa",
        size={"train": 77400, "test": 9535},
        license="cc-by-sa-4.0",
    ),
    CatalogEntry(
        "2wikimultihopqa",
        _FLASHRAG,
        "2wikimultihopqa",
        {"train": "train", "test": "dev"},
        flashrag,
        "exact_match",
        "two-hop questions over Wikipedia and Wikidata (2WikiMultihopQA)",
        _FLASHRAG_NOTE,
        family="qa",
        license="cc-by-sa-4.0",
    ),
    CatalogEntry(
        "musique",
        _FLASHRAG,
        "musique",
        {"train": "train", "test": "dev"},
        flashrag,
        "exact_match",
        "2-4 hop questions composed from single-hop ones (MuSiQue-Ans)",
        _FLASHRAG_NOTE,
        family="qa",
        license="cc-by-sa-4.0",
    ),
    CatalogEntry(
        "bamboogle",
        _FLASHRAG,
        "bamboogle",
        {"test": "test"},
        flashrag,
        "exact_match",
        "125 two-hop questions that search engines answered wrongly (Bamboogle)",
        "FlashRAG's copy (the collection Search-R1 trains on); its licence is the collection's.",
        family="qa",
        size={"test": 125},
        license="cc-by-sa-4.0",
    ),
)
