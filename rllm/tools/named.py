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

The names live in ``TOOLS``, a :class:`rllm.utils.registry.Registry` (docs/plugins.md): an installed
package adds tools through the ``rllm.tools`` entry-point group. A tool that runs model-written code
declares ``ToolCapabilities(runs_code=True)``, and a run that names it has its sandbox checked at start-up.
An agent written by hand passes its ``Tool`` objects directly and needs no name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rllm.tools.builtin import calculator, make_python_tool
from rllm.tools.finance_reports import table_lookup
from rllm.tools.tool import Tool
from rllm.utils.registry import Registry

__all__ = [
    "TOOLS",
    "ToolCapabilities",
    "ToolFactory",
    "make_named_tool",
    "register_tool",
    "tool_names",
    "tool_runs_code",
    "unregister_tool",
]

ToolFactory = Callable[[float], Tool]
"""Builds a named tool for one run, given the per-call time limit in seconds."""


@dataclass(frozen=True)
class ToolCapabilities:
    """What a named tool declares about itself, for the start-up checks."""

    runs_code: bool = False
    """It runs model-written code: a run that names it needs the sandbox's isolation (checked at start-up)."""


def _check_factory(name: str, factory: object) -> None:
    if not name.isidentifier():
        raise ValueError(f"tool name {name!r} must be a Python identifier (it is what the model calls)")
    if not callable(factory):
        raise TypeError(f"register_tool({name!r}, ...) needs a factory (timeout_s) -> Tool, not {factory!r}")


TOOLS: Registry[ToolFactory] = Registry(
    "tool", group="rllm.tools", key="workflow.tools", check=_check_factory
)
"""Every tool ``workflow.tools`` can name; the target is a :data:`ToolFactory`."""

TOOLS.register("calculator", lambda timeout_s: calculator, builtin=True, description="arithmetic")
TOOLS.register(
    "python",
    lambda timeout_s: make_python_tool(timeout_s=timeout_s),
    capabilities=ToolCapabilities(runs_code=True),
    builtin=True,
    description="runs Python in the sandbox",
)
TOOLS.register(
    "table_lookup",
    lambda timeout_s: table_lookup,
    builtin=True,
    description="the finance task's financial tables",
)


def tool_names() -> list[str]:
    """Every name ``workflow.tools`` accepts: the built-ins, then the registered ones."""
    return TOOLS.names()


def register_tool(
    name: str, factory: ToolFactory, *, replace: bool = False, capabilities: ToolCapabilities | None = None
) -> None:
    """Make ``factory``'s tool nameable in ``workflow.tools``. A name already taken is refused unless
    ``replace`` (a built-in's name always is)."""
    _check_factory(name, factory)
    if name in TOOLS and (not replace or TOOLS.plugin(name).extra.get("builtin")):
        raise ValueError(f"a tool named {name!r} is already registered: pick another name (or replace=True)")
    TOOLS.register(name, factory, replace=replace, capabilities=capabilities)


def unregister_tool(name: str) -> None:
    """Forget a registered tool (tests; a built-in stays)."""
    if name in TOOLS and not TOOLS.plugin(name).extra.get("builtin"):
        TOOLS.unregister(name)


def tool_runs_code(name: str) -> bool:
    """Whether the tool registered as ``name`` runs model-written code (it declares so)."""
    capabilities = TOOLS.plugin(name).capabilities
    return bool(getattr(capabilities, "runs_code", False))


def make_named_tool(name: str, *, timeout_s: float) -> Tool:
    """The tool registered as ``name``, built for a run whose calls may take ``timeout_s`` each."""
    made = TOOLS.get(name)(timeout_s)
    if not isinstance(made, Tool):
        raise TypeError(
            f"the factory of tool {name!r} returned {type(made).__name__}, not a Tool (use @tool)"
        )
    return made
