"""A tool that looks one value up in a set of tables: ``table_lookup(company, item, year)``.

``make_table_lookup_tool(tables)`` builds it over ``tables[company][item][year] -> value``. Names match
case-insensitively and ignore extra spaces ("ACME foods", "operating  income"); a key that does not exist
is an ``invalid_arguments`` error whose message lists what does (the companies, that company's items, the
item's years), so the model can correct its call on the next turn.
"""

from __future__ import annotations

from collections.abc import Mapping

from rllm.tools.tool import Tool, ToolArgumentsError

Tables = Mapping[str, Mapping[str, Mapping[int, float]]]
"""``tables[company][item][year]``: one table per company, a row per line item, a column per year."""

# How many names an error message lists before "... and N more".
_LISTED = 40


def _key(name: str) -> str:
    return " ".join(str(name).split()).casefold()


def _choices(names: list[str]) -> str:
    shown = ", ".join(names[:_LISTED])
    return shown if len(names) <= _LISTED else f"{shown} ... and {len(names) - _LISTED} more"


def format_value(value: float) -> str:
    """A table value as the tool prints it: an integer without decimals, else up to 4 decimals; no
    thousands separators, so the model can paste it into the calculator."""
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.4f}".rstrip("0").rstrip(".")


def make_table_lookup_tool(tables: Tables, *, name: str = "table_lookup", unit: str = "") -> Tool:
    """A tool returning ``tables[company][item][year]`` (see the module docstring). ``unit`` (e.g. "in
    millions of dollars") goes into the tool's description, so the model knows what the numbers mean."""
    if not tables:
        raise ValueError("make_table_lookup_tool needs at least one table")
    companies = {_key(c): c for c in tables}
    if len(companies) != len(tables):
        raise ValueError(
            "two companies' names differ only in case or spacing: the lookup could not tell them apart"
        )

    def table_lookup(company: str, item: str, year: int) -> str:
        """Look up one value in a company's financial table.

        Args:
            company: The company's name, as the question writes it.
            item: The line item, e.g. "revenue".
            year: The fiscal year, e.g. 2023.
        """
        found = companies.get(_key(company))
        if found is None:
            raise ToolArgumentsError(
                f"no table for company {company!r}; companies: {_choices(sorted(tables))}"
            )
        rows = tables[found]
        items = {_key(i): i for i in rows}
        row_name = items.get(_key(item))
        if row_name is None:
            raise ToolArgumentsError(f"{found} has no item {item!r}; its items: {', '.join(rows)}")
        row = rows[row_name]
        if year not in row:
            years = ", ".join(str(y) for y in sorted(row))
            raise ToolArgumentsError(f"{found} has no {row_name} for {year}; its years: {years}")
        return format_value(row[year])

    description = "Look up one value in a company's financial table"
    description += f" ({unit})." if unit else "."
    return Tool.from_function(table_lookup, name=name, description=description)
