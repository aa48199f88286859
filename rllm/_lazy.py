"""Public names a package imports on first use (PEP 562), so that importing the package stays cheap.

A package whose public names live in heavy modules (torch, transformers, FastAPI) declares them here
instead of importing them: ``import rllm.trainer`` then loads nothing, ``rllm.trainer.AgentTrainer``
loads the trainer. The package still lists the names in ``__all__`` and imports them under
``TYPE_CHECKING`` for type checkers and editors.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any


def lazy_exports(
    package: str, exports: dict[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, whose public name ``n`` is defined in the module
    ``exports[n]``; that module is imported the first time ``package.n`` is read."""
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:  # name and obj let the traceback suggest a close public name
            raise AttributeError(
                f"module {package!r} has no attribute {name!r}", name=name, obj=sys.modules[package]
            )
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value  # later lookups skip __getattr__
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports})

    return __getattr__, __dir__
