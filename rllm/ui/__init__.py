"""``rllm ui``: a web UI over the run store (JSON API in :mod:`rllm.ui.app`, front end in ``static/``).

``create_app`` resolves on first use (it imports Starlette)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rllm._lazy import lazy_exports

__all__ = ["create_app"]

if TYPE_CHECKING:
    from rllm.ui.app import create_app

__getattr__, __dir__ = lazy_exports(__name__, {"create_app": "rllm.ui.app"})
