"""Objects named in config or on the command line as ``module:attr`` or ``path/to/file.py:attr``.

    load_object("agent:solve")              # import agent (from the current directory too), take .solve
    load_object("flows/agent.py:solve")     # run that file as a module, take .solve

``rllm train`` (``workflow.flow``, ``workflow.evaluator``) and ``rllm eval`` (``--flow``, ``--evaluator``)
read user code this way. Every failure is an ``ObjectNotFoundError`` whose one-line message says what to fix.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["ObjectNotFoundError", "load_object"]


class ObjectNotFoundError(ValueError):
    """A ``module:attr`` spec names nothing importable; the message says which part is wrong."""


def load_object(spec: str, *, what: str = "object") -> Any:
    """``module:attr`` or ``path/to/file.py:attr`` → the object. The current directory is importable, as in
    ``python -m``: a project's own modules load from where ``rllm`` is run. ``what`` names the object in
    errors (``"workflow.flow"``)."""
    where, sep, attr = spec.rpartition(":")
    if not sep or not where or not attr.isidentifier():
        raise ObjectNotFoundError(
            f"{what} {spec!r} should be module:attribute or path/to/file.py:attribute (e.g. agent:solve)"
        )
    label = f"{what} {spec!r}"
    module = _load_file(where, label) if where.endswith(".py") else _import(where, label)
    if not hasattr(module, attr):
        public = sorted(  # what the module itself defines, not what it imports
            name
            for name, value in vars(module).items()
            if not name.startswith("_") and getattr(value, "__module__", None) == module.__name__
        )
        hint = f" (it defines {', '.join(public[:8])}{' ...' if len(public) > 8 else ''})" if public else ""
        raise ObjectNotFoundError(f"{label}: {where} has no attribute {attr!r}{hint}")
    return getattr(module, attr)


def _import(name: str, label: str) -> ModuleType:
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)  # the `rllm` console script, unlike `python -m`, does not put it there
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name is None or not (name == err.name or name.startswith(err.name + ".")):
            raise  # the module exists but imports something missing: that traceback is the useful one
        raise ObjectNotFoundError(
            f"{label}: no module named {name!r} importable from {cwd} (run rllm from the directory that "
            f"holds {name.split('.')[0]}.py, or install the package)"
        ) from None


def _load_file(where: str, label: str) -> ModuleType:
    path = Path(where).resolve()
    if not path.is_file():
        raise ObjectNotFoundError(f"{label}: {where} does not exist")
    sys.path.insert(0, str(path.parent))  # the file's sibling modules import as in a script
    module_spec = importlib.util.spec_from_file_location(path.stem, path)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module
