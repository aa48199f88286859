"""Services that put rllm's training backend and inference engine behind another project's API.

``rllm serve tinker`` (:mod:`rllm.serve.tinker`): the Tinker training and sampling API, for the
unmodified ``tinker`` SDK and tinker-cookbook recipes, on this machine's hardware."""

from __future__ import annotations

__all__: list[str] = []
