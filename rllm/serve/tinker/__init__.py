"""``rllm serve tinker``: the Tinker API (training + sampling of LoRA models) on your own hardware.

The unmodified ``tinker`` SDK talks to it with ``TINKER_BASE_URL=http://HOST:PORT`` and any
``TINKER_API_KEY`` starting with ``tml-`` (the SDK checks that prefix itself; the server checks the key
only when started with ``--api-key``). Training runs on rllm's ``LocalBackend`` (one LoRA adapter and
optimizer per created model), sampling on rllm's ``LocalEngine`` (one engine per saved set of sampler
weights, an LRU per model). See docs/tinker.md for the endpoint table and what differs from the hosted
service.

What the SDK (0.38) needs from a server, read from its source:

- ``POST /api/v1/client/config`` first, with httpx's plain transport: the server's feature flags
  (``ClientConfigResponse``). This server turns off the JWT exchange (``pjwt_auth_enabled``; the API key is
  sent as ``X-API-Key`` on every request), the pyqwest transport, fwd/bwd compression and the session
  futures poller (``sample_use_retrieve_futures``: each request polls ``/retrieve_future`` itself).
  ``/client/dynamic_config`` (refreshed every 5 min) gets the defaults.
- ``POST /api/v1/create_session`` (a ``ServiceClient``'s first real call), then a heartbeat every 10 s
  (``/session_heartbeat``; 410 tells it the session finished), ``/sessions/{id}/finish`` on close, and
  ``/telemetry`` batches (accepted and dropped; ``TINKER_TELEMETRY=0`` stops them client-side).
- Work is asynchronous: ``/create_model``, ``/forward_backward``, ``/optim_step``, ``/save_weights*``,
  ``/load_weights`` and ``/asample`` answer ``{"request_id", "model_id"}`` at once (``asample`` also one
  ``sample_sequence_ids`` entry per sample), and the client polls ``/retrieve_future`` until it gets the
  result, ``{"error", "category"}`` (raised as ``RequestFailedError``), or ``{"type": "try_again"}``
  (asked again at once, and logged as a warning: this server holds the poll up to 40 s first).
  ``ForwardBackwardOutput`` and ``SampleResponse`` results must be protobuf
  (``tinker.proto.tinker_public_pb2``); ``/forward_backward`` bodies are protobuf too (:mod:`.wire`).
- A ``TrainingClient`` numbers its requests ``seq_id = 1, 2, ...`` and expects them run in that order;
  the chunks of one big ``forward_backward`` may arrive out of it (:mod:`.worker`).
- ``get_info`` gives ``model_data.tokenizer_id``, which ``get_tokenizer`` loads with
  ``AutoTokenizer.from_pretrained``: this server answers the model directory, so it loads locally.
  ``SamplingClient.get_tokenizer`` loads the *base model name* instead: serve a model by its directory
  (``--model /path``) for that to work offline.
- ``forward_backward_custom`` runs the custom loss client-side (``custom_loss_server_side`` is off): a
  ``forward`` then a ``cross_entropy`` ``forward_backward`` with ``weights = -dLoss/dlogprobs``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rllm._lazy import lazy_exports

__all__ = ["ServeConfig", "ServerThread", "TinkerService", "build_service", "create_app", "serve"]

if TYPE_CHECKING:
    from rllm.serve.tinker.app import create_app
    from rllm.serve.tinker.server import ServeConfig, ServerThread, build_service, serve
    from rllm.serve.tinker.service import TinkerService

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "create_app": "rllm.serve.tinker.app",
        "ServeConfig": "rllm.serve.tinker.server",
        "ServerThread": "rllm.serve.tinker.server",
        "build_service": "rllm.serve.tinker.server",
        "serve": "rllm.serve.tinker.server",
        "TinkerService": "rllm.serve.tinker.service",
    },
)
