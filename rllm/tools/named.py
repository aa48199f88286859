"""Tools by name: what ``workflow.tools`` (the tool_agent workflow) can list.

A name maps to a factory that builds the tool for one run from the workflow's per-call time limit
(``workflow.tool_timeout_s``). The built-ins are ``calculator``, ``python`` (sandboxed) and ``table_lookup``
(the fictional companies' financial tables of the ``finance`` task); a tool of your
own becomes nameable in config with one call::

    @tool
    def lookup(key: str) -> str:
        '''Look a key up in the table.'''
        ...

    register_tool("lookup", lambda timeout_s: lookup)   # then: workflow.tools=[calculator, lookup]

An agent written by hand passes its ``Tool`` objects directly and needs no name.
"""

from __future__ import annotations

from collections.abc import Callable

from rllm.tools.builtin import calculator, make_python_tool
from rllm.tools.finance_reports import table_lookup
from rllm.tools.tool import Tool
from rllm.utils.config import unknown_name

__all__ = ["ToolFactory", "make_named_tool", "register_tool", "tool_names", "unregister_tool"]

ToolFactory = Callable[[float], Tool]
"""Builds a named tool for one run, given the per-call time limit in seconds."""

_BUILTIN: dict[str, ToolFactory] = {
    "calculator": lambda timeout_s: calculator,
    "python": lambda timeout_s: make_python_tool(timeout_s=timeout_s),
    "table_lookup": lambda timeout_s: table_lookup,
}
_USER: dict[str, ToolFactory] = {}


def tool_names() -> list[str]:
    """Every name ``workflow.tools`` accepts: the built-ins, then the registered ones."""
    return [*_BUILTIN, *_USER]


def register_tool(name: str, factory: ToolFactory, *, replace: bool = False) -> None:
    """Make ``factory``'s tool nameable in ``workflow.tools``. A name already taken is refused unless
    ``replace`` (a built-in's name always is)."""
    if not name.isidentifier():
        raise ValueError(f"tool name {name!r} must be a Python identifier (it is what the model calls)")
    if name in _BUILTIN or (name in _USER and not replace):
        raise ValueError(f"a tool named {name!r} is already registered: pick another name (or replace=True)")
    if not callable(factory):
        raise TypeError(f"register_tool({name!r}, ...) needs a factory (timeout_s) -> Tool, not {factory!r}")
    _USER[name] = factory


def unregister_tool(name: str) -> None:
    """Forget a registered tool (tests; a built-in stays)."""
    _USER.pop(name, None)


def make_named_tool(name: str, *, timeout_s: float) -> Tool:
    """The tool registered as ``name``, built for a run whose calls may take ``timeout_s`` each."""
    factory = _BUILTIN.get(name) or _USER.get(name)
    if factory is None:
        raise KeyError(unknown_name("tool", name, tool_names()))
    made = factory(timeout_s)
    if not isinstance(made, Tool):
        raise TypeError(
            f"the factory of tool {name!r} returned {type(made).__name__}, not a Tool (use @tool)"
        )
    return made
