"""The financial tables of 32 fictional companies: what the built-in ``table_lookup`` tool reads and the
built-in ``finance`` task (``rllm.data.finance``) asks about.

Each company has three line items (revenue, operating income, net income, in millions of dollars) for the
fiscal years 2021-2023, generated from a fixed seed, so every machine sees the same numbers. Operating
income is 5-30 % of revenue and net income 55-85 % of operating income, as in a plausible report.
"""

from __future__ import annotations

import functools
import random
from types import MappingProxyType

from rllm.tools.table import Tables, make_table_lookup_tool

_FIRST = ("Alder", "Birch", "Cedar", "Delta", "Ember", "Falcon", "Granite", "Harbor")
_SECOND = ("Foods", "Motors", "Systems", "Energy")
YEARS = (2021, 2022, 2023)
ITEMS = ("revenue", "operating income", "net income")
UNIT = "in millions of dollars"
_SEED = 20231231


@functools.cache
def financial_reports() -> Tables:
    """``tables[company][item][year]`` for the 32 fictional companies ("Alder Foods" ... "Harbor Energy")."""
    rng = random.Random(_SEED)
    tables: dict[str, dict[str, dict[int, float]]] = {}
    for first in _FIRST:
        for second in _SECOND:
            revenue, operating, net = {}, {}, {}
            base = rng.randint(200, 1500)
            for year in YEARS:
                revenue[year] = base
                operating[year] = round(base * rng.uniform(0.05, 0.30))
                net[year] = round(operating[year] * rng.uniform(0.55, 0.85))
                base = round(base * rng.uniform(0.85, 1.25))
            tables[f"{first} {second}"] = {
                "revenue": MappingProxyType(revenue),
                "operating income": MappingProxyType(operating),
                "net income": MappingProxyType(net),
            }
    return MappingProxyType({company: MappingProxyType(rows) for company, rows in tables.items()})


table_lookup = make_table_lookup_tool(financial_reports(), unit=UNIT)
"""The built-in ``table_lookup`` tool (``workflow.tools=[table_lookup, calculator]``) over
``financial_reports()``."""
