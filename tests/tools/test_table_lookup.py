"""The ``table_lookup`` tool (``rllm.tools.table``) and the built-in one over the fictional reports."""

from __future__ import annotations

import asyncio
import json

import pytest

from rllm.tool_calls import ToolCall
from rllm.tools import ToolRegistry, make_named_tool
from rllm.tools.finance_reports import ITEMS, YEARS, financial_reports, table_lookup
from rllm.tools.table import format_value, make_table_lookup_tool
from rllm.tools.tool import ToolArgumentsError

TABLES = {"Acme Corp": {"revenue": {2022: 100, 2023: 120.5}, "net income": {2023: 7}}}


def _run(tool_name: str, registry: ToolRegistry, **arguments: object) -> tuple[str, str | None]:
    call = ToolCall(id="c1", name=tool_name, arguments=json.dumps(arguments))
    result = asyncio.run(registry.execute(call))
    return result.content, result.error


def test_lookup_matches_names_loosely_and_prints_plain_numbers() -> None:
    lookup = make_table_lookup_tool(TABLES, unit="in millions of dollars")
    assert lookup(company="Acme Corp", item="revenue", year=2022) == "100"
    assert lookup(company="  acme   CORP ", item="Revenue", year=2023) == "120.5"
    assert "in millions of dollars" in lookup.description
    assert format_value(1234567.0) == "1234567" and format_value(0.123456) == "0.1235"


def test_unknown_keys_say_what_exists() -> None:
    lookup = make_table_lookup_tool(TABLES)
    with pytest.raises(ToolArgumentsError, match=r"no table for company 'Acme'; companies: Acme Corp"):
        lookup(company="Acme", item="revenue", year=2023)
    with pytest.raises(
        ToolArgumentsError, match=r"Acme Corp has no item 'profit'; its items: revenue, net income"
    ):
        lookup(company="Acme Corp", item="profit", year=2023)
    with pytest.raises(ToolArgumentsError, match=r"Acme Corp has no net income for 2022; its years: 2023"):
        lookup(company="Acme Corp", item="net income", year=2022)
    with pytest.raises(ValueError, match="at least one table"):
        make_table_lookup_tool({})
    with pytest.raises(ValueError, match="differ only in case"):
        make_table_lookup_tool({"Acme": {}, "ACME": {}})


def test_the_registry_runs_model_calls_and_reports_bad_ones_to_the_model() -> None:
    registry = ToolRegistry([make_table_lookup_tool(TABLES)])
    # A year written as a string (as small models do) is read as the number it is.
    assert _run("table_lookup", registry, company="Acme Corp", item="net income", year="2023") == ("7", None)
    content, error = _run("table_lookup", registry, company="Globex", item="revenue", year=2023)
    assert error == "invalid_arguments" and "companies: Acme Corp" in content
    content, error = _run("table_lookup", registry, company="Acme Corp", item="revenue")
    assert error == "invalid_arguments" and "year" in content


def test_the_built_in_tool_reads_the_fictional_reports() -> None:
    reports = financial_reports()
    assert len(reports) == 32
    assert make_named_tool("table_lookup", timeout_s=5.0) is table_lookup
    for company, rows in reports.items():
        assert list(rows) == list(ITEMS)
        for item in ITEMS:
            assert sorted(rows[item]) == list(YEARS)
        for year in YEARS:
            revenue, operating, net = (rows[item][year] for item in ITEMS)
            assert 0 < net <= operating < revenue  # the shape of a plausible report
            assert table_lookup(company=company, item="operating income", year=year) == str(int(operating))
