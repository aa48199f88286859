"""The two Tinker payloads that travel as protobuf, not JSON: the ``/forward_backward`` request, and the
``ForwardBackwardOutput`` / ``SampleResponse`` results of ``/retrieve_future``.

The SDK (0.38) encodes a forward/backward request with ``tinker.proto.request_conv`` (tokens as int32
bytes, tensors as dense or sparse-CSR bytes) and accepts those two result types *only* as protobuf
(``Accept: application/x-protobuf``; a JSON body for them is refused by ``api_future_impl``). The message
classes are the SDK's own generated ones (``tinker.proto.tinker_public_pb2``), so the wire format is the
SDK's by construction; only the small conversions to and from numpy live here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from tinker.proto import tinker_public_pb2 as pb


class WireError(ValueError):
    """A request body the service cannot read; the message says what was wrong."""


_NUMPY_DTYPES: dict[int, np.dtype] = {
    pb.DTYPE_FLOAT32: np.dtype(np.float32),
    pb.DTYPE_INT64: np.dtype(np.int64),
    pb.DTYPE_INT32: np.dtype(np.int32),
}


@dataclass
class WireDatum:
    """One ``tinker.Datum`` as arrays: the model-input tokens and each named ``loss_fn_inputs`` tensor
    (dense, in its declared shape)."""

    tokens: list[int]
    inputs: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass
class ForwardBackwardCall:
    """A decoded ``/forward_backward`` request."""

    model_id: str
    seq_id: int
    loss_fn: str
    loss_fn_config: dict[str, float | str]
    forward_only: bool
    data: list[WireDatum]


def _tensor(msg: pb.Tensor, name: str) -> np.ndarray:
    """A proto ``Tensor`` as a dense numpy array (a sparse CSR one filled with 0 where it lists nothing,
    the SDK's default ``pad_value``)."""
    dtype = _NUMPY_DTYPES.get(msg.dtype)
    if dtype is None:
        raise WireError(
            f"loss_fn_inputs[{name!r}] has an unsupported dtype ({msg.dtype}): send float32 or int64"
        )
    shape = list(msg.shape)
    if msg.HasField("sparse_csr"):
        csr = msg.sparse_csr
        if len(shape) != 2:
            raise WireError(f"loss_fn_inputs[{name!r}] is sparse but not 2-D (shape {shape})")
        values = np.frombuffer(csr.values, dtype=dtype)
        crow = np.frombuffer(csr.crow_indices, dtype=np.int64)
        col = np.frombuffer(csr.col_indices, dtype=np.int64)
        dense = np.zeros(shape, dtype=dtype)
        for row in range(shape[0]):
            lo, hi = int(crow[row]), int(crow[row + 1])
            dense[row, col[lo:hi]] = values[lo:hi]
        return dense
    flat = np.frombuffer(msg.dense, dtype=dtype)
    if shape and int(np.prod(shape)) != flat.size:
        raise WireError(f"loss_fn_inputs[{name!r}] has {flat.size} values for shape {shape}")
    return flat.reshape(shape) if shape else flat.copy()


def _tokens(datum: pb.Datum, index: int) -> list[int]:
    tokens: list[int] = []
    for chunk in datum.model_input:
        kind = chunk.WhichOneof("chunk")
        if kind != "encoded_text":
            raise WireError(
                f"data[{index}].model_input has a {kind} chunk: this service takes text tokens only"
            )
        tokens.extend(np.frombuffer(chunk.encoded_text.tokens, dtype=np.int32).tolist())
    return tokens


def _loss_fn_config(msg: pb.ForwardBackwardRequest) -> dict[str, float | str]:
    """``loss_fn_config_v2`` (numbers and strings) when set, else the legacy float-only map."""
    if msg.loss_fn_config_v2:
        config: dict[str, float | str] = {}
        for key, value in msg.loss_fn_config_v2.items():
            config[key] = value.text if value.WhichOneof("value") == "text" else float(value.number)
        return config
    return {key: float(value) for key, value in msg.loss_fn_config.items()}


def decode_forward_backward(body: bytes, content_encoding: str | None = None) -> ForwardBackwardCall:
    """Read a ``/forward_backward`` body. The client config this server hands out turns the SDK's zstd
    compression off (loopback and LAN gain little from it), so an encoded body is refused."""
    if content_encoding not in (None, "", "identity"):
        raise WireError(f"forward_backward bodies are read uncompressed, not {content_encoding}")
    msg = pb.ForwardBackwardRequest()
    try:
        msg.ParseFromString(body)
    except Exception as exc:  # protobuf's DecodeError, and whatever a truncated body raises
        raise WireError(
            f"the forward_backward body is not a ForwardBackwardRequest protobuf ({exc})"
        ) from exc
    data = [
        WireDatum(_tokens(d, i), {name: _tensor(t, name) for name, t in d.loss_fn_inputs.items()})
        for i, d in enumerate(msg.data)
    ]
    return ForwardBackwardCall(
        model_id=msg.model_id,
        seq_id=msg.seq_id,
        loss_fn=msg.loss_fn,
        loss_fn_config=_loss_fn_config(msg),
        forward_only=msg.forward_only,
        data=data,
    )


def _batched(arrays: Sequence[np.ndarray], dtype: np.dtype, proto_dtype: int) -> pb.BatchedTensor:
    """Per-datum 1-D arrays as one ``BatchedTensor``: concatenated bytes and byte offsets."""
    parts = [np.ascontiguousarray(a, dtype=dtype) for a in arrays]
    offsets = np.zeros(len(parts) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([p.nbytes for p in parts])
    return pb.BatchedTensor(
        data=b"".join(p.tobytes() for p in parts), offsets=offsets.tobytes(), dtype=proto_dtype
    )


def encode_forward_backward_output(
    outputs: Sequence[dict[str, np.ndarray]], metrics: dict[str, float]
) -> bytes:
    """A ``ForwardBackwardOutput``: one ``ArrayRecord`` whose fields hold each datum's float32 outputs
    (``logprobs`` and the like; every datum has the same field names), and the metrics."""
    record = pb.ArrayRecord(type_tag="ArrayRecord", num_datums=len(outputs))
    names = list(outputs[0]) if outputs else []
    for name in names:
        record.fields[name].CopyFrom(
            _batched([o[name] for o in outputs], np.dtype(np.float32), pb.DTYPE_FLOAT32)
        )
    msg = pb.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord", metrics=metrics)
    msg.loss_fn_outputs.append(record)
    return msg.SerializeToString()


@dataclass
class SampledSequence:
    tokens: list[int]
    logprobs: list[float]
    stop_reason: str  # "stop" | "length"


def encode_sample_response(
    sequences: Sequence[SampledSequence], prompt_logprobs: Sequence[float | None] | None = None
) -> bytes:
    """A ``SampleResponse``: tokens as int32 bytes, logprobs as float32 bytes, prompt logprobs with NaN
    where there is none (the first prompt token)."""
    msg = pb.SampleResponse()
    for seq in sequences:
        msg.sequences.append(
            pb.SampledSequence(
                stop_reason=pb.STOP_REASON_STOP if seq.stop_reason == "stop" else pb.STOP_REASON_LENGTH,
                tokens=np.asarray(seq.tokens, dtype=np.int32).tobytes(),
                logprobs=np.asarray(seq.logprobs, dtype=np.float32).tobytes(),
            )
        )
    if prompt_logprobs is not None:
        values = [np.nan if v is None else v for v in prompt_logprobs]
        msg.prompt_logprobs = np.asarray(values, dtype=np.float32).tobytes()
    return msg.SerializeToString()
