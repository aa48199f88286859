"""LiveCodeBench's test-case encoding, decoded safely: JSON, or base64 of zlib of a pickled JSON string.

A hub file is untrusted input: the unpickler refuses every object (only the JSON string inside is
accepted), and inflating stops at ``MAX_DECOMPRESSED_BYTES`` so a compression bomb cannot exhaust memory.
"""

from __future__ import annotations

import base64
import io
import json
import pickle
import zlib
from typing import Any

__all__ = ["MAX_DECOMPRESSED_BYTES", "DecompressedTooLarge", "decode_lcb_tests"]


class _NoObjects(pickle.Unpickler):
    """Unpickles plain values only: LiveCodeBench pickles a JSON string, and a hub file must never be able
    to make us import and call arbitrary objects."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from dataset test cases")


# The largest decompressed private-test blob accepted per problem. LiveCodeBench's biggest are tens of MiB;
# a hub file crafted as a compression bomb (a few KiB that inflate to GiBs) stops here instead of exhausting memory.
MAX_DECOMPRESSED_BYTES = 512 * 1024 * 1024
_CHUNK_BYTES = 1024 * 1024


class DecompressedTooLarge(ValueError):
    """A compressed dataset field inflates past the limit (a compression bomb, or a limit set too low)."""


def _bounded_inflate(data: bytes, max_bytes: int, source: str) -> bytes:
    """``zlib.decompress(data)``, refusing to produce more than ``max_bytes``: inflated a chunk at a time,
    so memory never holds more than the limit plus one chunk."""
    inflater = zlib.decompressobj()
    out, pending = bytearray(), data
    while not inflater.eof:
        chunk = inflater.decompress(pending, _CHUNK_BYTES)
        pending = inflater.unconsumed_tail
        if not chunk and not pending and not inflater.eof:
            raise zlib.error(f"{source}: the compressed test cases end before their zlib stream does")
        out += chunk
        if len(out) > max_bytes:
            raise DecompressedTooLarge(
                f"{source}: compressed test cases inflate past {max_bytes} bytes (a compression bomb?); "
                "pass a larger max_decompressed_bytes only for a source you trust"
            )
    return bytes(out)


def decode_lcb_tests(
    value: str | None, *, source: str = "livecodebench", max_decompressed_bytes: int | None = None
) -> list[dict[str, Any]]:
    """LiveCodeBench test cases: a JSON list, or (private tests) base64 of zlib of a pickled JSON string,
    inflated to at most ``max_decompressed_bytes`` (default ``MAX_DECOMPRESSED_BYTES``; beyond it
    ``DecompressedTooLarge`` naming ``source``)."""
    if not value:
        return []
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        pass
    limit = MAX_DECOMPRESSED_BYTES if max_decompressed_bytes is None else max_decompressed_bytes
    raw = _bounded_inflate(base64.b64decode(value.encode()), limit, source)
    payload = _NoObjects(io.BytesIO(raw)).load()
    return json.loads(payload) if isinstance(payload, (str, bytes)) else payload
