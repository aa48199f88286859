"""Tools by name (``rllm.tools.named``): what ``workflow.tools`` lists, built-ins and registered ones alike."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rllm.tools import Tool, calculator, make_named_tool, register_tool, tool, tool_names, unregister_tool
from rllm.trainer.config import TrainConfig
from rllm.trainer.workflows import build_workflow
from rllm.utils.config import ConfigError, load_config
from rllm.workflows.tool_agent import ToolAgentWorkflow


@tool
def lookup(key: str) -> str:
    """Look a key up in a two-row table.

    Args:
        key: the row's name.
    """
    return {"a": "1", "b": "2"}.get(key, "no such row")


@pytest.fixture
def registered_lookup() -> Iterator[None]:
    register_tool("lookup", lambda timeout_s: lookup)
    yield
    unregister_tool("lookup")


def test_the_built_ins_are_named_and_built_for_the_run() -> None:
    assert tool_names()[:2] == ["calculator", "python"]
    assert make_named_tool("calculator", timeout_s=5.0) is calculator
    python = make_named_tool("python", timeout_s=2.0)
    assert isinstance(python, Tool) and python.name == "python"


def test_a_registered_tool_is_what_the_tool_agent_calls(registered_lookup: None) -> None:
    cfg = load_config(TrainConfig, None, ["workflow.name=tool_agent", "workflow.tools=[calculator, lookup]"])
    workflow = build_workflow(cfg)
    assert isinstance(workflow, ToolAgentWorkflow)
    assert workflow.registry.names == ["calculator", "lookup"]
    assert workflow.registry.get("lookup") is lookup


def test_unknown_and_repeated_names_are_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match=r"unknown tool 'lokup' — did you mean 'lookup'\?") as info:
        register_tool("lookup", lambda timeout_s: lookup)
        try:
            load_config(TrainConfig, None, ["workflow.name=tool_agent", "workflow.tools=[lokup]"])
        finally:
            unregister_tool("lookup")
    assert "\n" not in str(info.value)
    with pytest.raises(ConfigError, match="names a tool twice"):
        load_config(
            TrainConfig, None, ["workflow.name=tool_agent", "workflow.tools=[calculator, calculator]"]
        )
    with pytest.raises(KeyError, match="unknown tool 'pyhton' — did you mean 'python'"):
        make_named_tool("pyhton", timeout_s=1.0)


def test_bad_registrations_are_refused(registered_lookup: None) -> None:
    with pytest.raises(ValueError, match="already registered"):
        register_tool("lookup", lambda timeout_s: lookup)
    with pytest.raises(ValueError, match="already registered"):
        register_tool("calculator", lambda timeout_s: lookup, replace=True)
    with pytest.raises(ValueError, match="Python identifier"):
        register_tool("my tool", lambda timeout_s: lookup)
    register_tool("lookup", lambda timeout_s: "not a tool", replace=True)
    with pytest.raises(TypeError, match="returned str, not a Tool"):
        make_named_tool("lookup", timeout_s=1.0)
