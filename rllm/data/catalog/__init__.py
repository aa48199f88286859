"""Well-known benchmarks on the Hugging Face hub: where each lives and how its rows become tasks.

Each ``CatalogEntry`` says where a benchmark lives on the hub (repo, config, splits), how one hub row
becomes a task in the common schema (``transform``), and which reward grades it. ``rllm.data.hub.pull``
downloads one and registers it in the ``DatasetRegistry``. The catalog imports neither of them: the registry
reads it (to say that a dataset it lacks can be pulled), and the puller writes what it reads here into
the registry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rllm.data.catalog import code_sets, math_sets, qa_sets
from rllm.data.schema import validate_task
from rllm.utils.config import did_you_mean

__all__ = ["CATALOG", "CatalogEntry", "catalog_entry", "not_in_catalog"]

HubTransform = Callable[[dict[str, Any]], "dict[str, Any] | None"]


@dataclass(frozen=True)
class CatalogEntry:
    """A benchmark on the hub. ``splits`` maps our split name to the hub's split expression (which may
    slice, as in ``"train[-1024:]"``). ``transform(hub_row)`` returns the task's ``question``,
    ``ground_truth`` and ``metadata`` (and ``task_id`` when the hub has one), or None to skip the row."""

    name: str
    hub_path: str
    config: str | None
    splits: dict[str, str]
    transform: HubTransform
    reward: str
    description: str
    notes: str = ""  # access restrictions, caveats; shown in the docs

    @property
    def source(self) -> str:
        return f"huggingface:{self.hub_path}" + (f" ({self.config})" if self.config else "")

    def to_task(self, hub_row: Mapping[str, Any], split: str, index: int) -> dict[str, Any] | None:
        """One hub row as a validated task row (None when the transform skips it)."""
        row = self.transform(dict(hub_row))
        if row is None:
            return None
        task = {"task_id": f"{self.name}-{split}-{index}", "data_source": self.name, "metadata": {}, **row}
        return validate_task(task, index)

    def to_tasks(self, hub_rows: Iterable[Mapping[str, Any]], split: str) -> list[dict[str, Any]]:
        tasks = []
        for index, hub_row in enumerate(hub_rows):
            try:
                task = self.to_task(hub_row, split, index)
            except (KeyError, TypeError, ValueError) as err:
                raise ValueError(
                    f"{self.name}: cannot convert hub row {index} of split {split!r} "
                    f"({type(err).__name__}: {err}); columns: {', '.join(hub_row)}"
                ) from err
            if task is not None:
                tasks.append(task)
        return tasks


CATALOG: dict[str, CatalogEntry] = {
    entry.name: entry
    for entry in (
        CatalogEntry(
            "gsm8k",
            "openai/gsm8k",
            "main",
            {"train": "train", "test": "test"},
            math_sets.gsm8k,
            "math",
            "grade-school math word problems (7.5k train, 1.3k test)",
        ),
        CatalogEntry(
            "math500",
            "HuggingFaceH4/MATH-500",
            None,
            {"test": "test"},
            math_sets.math500,
            "math",
            "500 competition problems from the MATH test set (PRM800K subset)",
        ),
        CatalogEntry(
            "aime2024",
            "HuggingFaceH4/aime_2024",
            None,
            {"test": "train"},
            math_sets.aime2024,
            "math",
            "the 30 problems of AIME 2024 I and II (integer answers)",
        ),
        CatalogEntry(
            "aime2025",
            "MathArena/aime_2025",
            None,
            {"test": "train"},
            math_sets.aime2025,
            "math",
            "the 30 problems of AIME 2025 I and II, as used by MathArena (integer answers)",
        ),
        CatalogEntry(
            "amc",
            "AI-MO/aimo-validation-amc",
            None,
            {"test": "train"},
            math_sets.amc,
            "math",
            "83 AMC 12 problems from 2022-2023 with numeric answers (Numina's validation set)",
        ),
        CatalogEntry(
            "countdown-3to4",
            "Jiayi-Pan/Countdown-Tasks-3to4",
            None,
            {"train": "train[:-1024]", "test": "train[-1024:]"},
            math_sets.countdown,
            "countdown",
            "Countdown with 3-4 numbers (TinyZero's set; the last 1024 rows are held out as test)",
            "490k rows. The generated built-in `countdown` needs no download.",
        ),
        CatalogEntry(
            "finqa",
            "TheFinAI/flare-finqa",
            None,
            {"train": "train", "validation": "valid", "test": "test"},
            math_sets.finqa,
            "math",
            "numerical questions over financial reports (FinQA, FinBen/FLARE prompt format)",
            "Gated on the hub: accept its terms and log in (`hf auth login`). Answers are numbers "
            "graded by the `math` reward's numeric equivalence, not FinQA's program accuracy.",
        ),
        CatalogEntry(
            "humaneval",
            "openai/openai_humaneval",
            None,
            {"test": "test"},
            code_sets.humaneval,
            "code",
            "164 hand-written Python functions with unit tests",
        ),
        CatalogEntry(
            "mbpp",
            "google-research-datasets/mbpp",
            "full",
            {"train": "train", "validation": "validation", "test": "test"},
            code_sets.mbpp,
            "code",
            "974 basic Python programming problems with assert tests",
        ),
        CatalogEntry(
            "livecodebench",
            "lighteval/code_generation_lite",
            "v6",
            {"test": "test"},
            code_sets.livecodebench,
            "code",
            "recent contest problems (LeetCode, AtCoder, Codeforces), release v6 problems",
            "The parquet mirror of livecodebench/code_generation_lite (whose loading script recent "
            "`datasets` no longer runs). Private tests are decompressed at pull time.",
        ),
        CatalogEntry(
            "hotpotqa",
            "hotpotqa/hotpot_qa",
            "distractor",
            {"train": "train", "test": "validation"},
            qa_sets.hotpotqa,
            "f1",
            "multi-hop Wikipedia questions; the 10 distractor paragraphs are in metadata.context",
            "Train is 90k rows with their paragraphs (about 600 MB to download).",
        ),
        CatalogEntry(
            "mmlu-pro",
            "TIGER-Lab/MMLU-Pro",
            None,
            {"test": "test", "validation": "validation"},
            qa_sets.mmlu_pro,
            "multiple_choice",
            "12k multiple-choice questions, up to 10 options A-J",
        ),
        CatalogEntry(
            "gpqa-diamond",
            "Idavidrein/gpqa",
            "gpqa_diamond",
            {"test": "train"},
            qa_sets.gpqa,
            "multiple_choice",
            "198 graduate-level science questions, 4 options shuffled per question",
            "Gated on the hub: accept its terms and log in (`hf auth login`).",
        ),
    )
}


def catalog_entry(name: str) -> CatalogEntry:
    """The catalog entry ``name``; ``KeyError`` listing the catalog otherwise."""
    try:
        return CATALOG[name]
    except KeyError:
        raise KeyError(not_in_catalog(name)) from None


def not_in_catalog(name: str) -> str:
    """Why ``name`` cannot be pulled: the closest catalog entry, or all of them."""
    return f"{name!r} is not in the catalog" + (
        did_you_mean(name, CATALOG) or f": choose one of {', '.join(CATALOG)}"
    )
