"""Well-known benchmarks on the Hugging Face hub: where each lives and how its rows become tasks.

Each ``CatalogEntry`` says where a benchmark lives on the hub (repo, config, splits), how one hub row
becomes a task in the common schema (``transform``), which reward grades it, and its size and licence as
its dataset card gives them. The entries live with their transforms, one module per family (``math_sets``,
``code_sets``, ``qa_sets``, ``reasoning_sets``, ``finance_sets``, ``agent_sets``). ``rllm.data.hub.pull``
downloads one and registers it in the ``DatasetRegistry``. The catalog imports neither of them: the registry
reads it (to say that a dataset it lacks can be pulled), and the puller writes what it reads here into
the registry.
"""

from __future__ import annotations

from rllm.data.catalog import agent_sets, code_sets, finance_sets, math_sets, qa_sets, reasoning_sets
from rllm.data.catalog._entry import FAMILIES, UNKNOWN, CatalogEntry, HubTransform
from rllm.utils.config import did_you_mean

__all__ = [
    "CATALOG",
    "FAMILIES",
    "UNKNOWN",
    "CatalogEntry",
    "HubTransform",
    "catalog_entry",
    "catalog_families",
    "not_in_catalog",
]


def _collect() -> dict[str, CatalogEntry]:
    catalog: dict[str, CatalogEntry] = {}
    for module in (math_sets, code_sets, qa_sets, reasoning_sets, finance_sets, agent_sets):
        for entry in module.ENTRIES:
            if entry.name in catalog:
                raise ValueError(f"catalog entry {entry.name!r} is defined twice")
            catalog[entry.name] = entry
    return catalog


CATALOG: dict[str, CatalogEntry] = _collect()


def catalog_families() -> dict[str, list[CatalogEntry]]:
    """The entries of each family, families in ``FAMILIES`` order, entries in catalog order."""
    return {family: [e for e in CATALOG.values() if e.family == family] for family in FAMILIES}


def catalog_entry(name: str) -> CatalogEntry:
    """The catalog entry ``name``; ``KeyError`` listing the catalog otherwise."""
    try:
        return CATALOG[name]
    except KeyError:
        raise KeyError(not_in_catalog(name)) from None


def not_in_catalog(name: str) -> str:
    """Why ``name`` cannot be pulled: the closest catalog entry, or where to see them all."""
    return f"{name!r} is not in the catalog" + (
        did_you_mean(name, CATALOG)
        or f": `rllm dataset list` shows its {len(CATALOG)} benchmarks ({', '.join(list(CATALOG)[:3])}, ...)"
    )
