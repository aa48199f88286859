"""The model gateway: an OpenAI-compatible front for the inference engine that records token-faithful
traces per session. ``create_app`` lives in :mod:`rllm.gateway.app` (it imports Starlette); the trace store
in :mod:`rllm.gateway.traces` needs only the standard library and pydantic."""

from rllm.gateway.traces import Trace, TraceStore

__all__ = ["Trace", "TraceStore"]
