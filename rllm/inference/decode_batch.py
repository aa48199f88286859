"""The running batch of the local engine: rows decoding together over one shared, left-padded KV cache.

Every row is right-aligned: its latest token sits in the last column of the cache, earlier columns hold its
earlier tokens, and the columns before its first token are padding (``attn_BT`` 0, never attended to).
Positions count per row from its first real token (``next_pos_B1``), so rows of different lengths share
one forward pass. Because all rows end in the same column, the next decode step appends one column for
every row, and rows can be added or removed between steps:

- **join** (:meth:`DecodeBatch.merge`): newcomers are prefilled on their own (a batch of their own, from
  ``left_pad``), then the narrower of the two caches is left-padded with zeros to the wider one's
  width and the two are concatenated along the batch dim (keys, values, attention mask, positions, logits,
  sampling settings, adapter slots). The padding is masked out, so a row computes exactly what it would
  alone, up to float rounding in batched matmuls.
- **leave** (:meth:`DecodeBatch.select`): finished rows are dropped with ``cache.batch_select_indices``; the
  columns no remaining row uses (leading padding left by a longer row that finished) are cut off, so the
  cache is never wider than the longest row still decoding.

Between steps (the state these methods take and leave) the cache holds every token of every row but the
one about to be sampled, ``attn_BT`` is as wide as the cache, and ``logits_BV`` holds each row's logits for
its next token.

Why a growing cache with spare room (:class:`RoomyLayer`) and not a preallocated (static) one: a plain
``DynamicLayer`` concatenates every layer's keys and values with the new column each step, a copy of the
whole cache per step (measured 2026-12-03 on the shared 2-core AMD EPYC, 1 thread, loaded: 11 % of an fp32
batch-32 decode step at 74 cached tokens, and it grows with the length). :class:`RoomyLayer` keeps them in a
buffer with ``ROOM`` free columns after the last one and writes the new column in place, copying only when the
room runs out or the batch changes (a join, a leave). transformers' ``StaticCache`` was tried earlier and
decoded no faster (8 rows, 48 steps, 1 thread: 160-188 ms per step against 152-155 ms), since its attention
spans the whole preallocated length every step; here attention reads only the columns in use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer


def left_pad(
    rows: list[list[int]] | list[tuple[int, ...]], pad_id: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Left-pad token rows into ``(input_ids, attention_mask, position_ids)``, each ``[B, max_len]``, with
    positions counting from 0 at each row's first real token (the layout a KV-cache prefill needs)."""
    max_len = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), max_len), pad_id, dtype=torch.long)
    attn = torch.zeros((len(rows), max_len), dtype=torch.long)
    for i, r in enumerate(rows):
        input_ids[i, max_len - len(r) :] = torch.tensor(r, dtype=torch.long)
        attn[i, max_len - len(r) :] = 1
    input_ids, attn = input_ids.to(device), attn.to(device)
    return input_ids, attn, (attn.cumsum(-1) - 1).clamp(min=0)


@dataclass
class DecodeBatch:
    """The rows decoding together and their shared KV cache (see the module docstring for the layout).

    Created by the engine's prefill of newly admitted rows, grown by :meth:`merge` when more rows join,
    shrunk by :meth:`select` as rows finish, and dropped when its last row leaves or a weight swap pauses
    it (a paused row is prefilled again, prompt plus the tokens it has, when it resumes)."""

    rows: list[Any]  # the engine's rows, in batch order
    cache: DynamicCache
    attn_BT: torch.Tensor  # 1 where a column holds a real token of that row
    next_pos_B1: torch.Tensor  # the position of each row's next token
    logits_BV: torch.Tensor  # each row's logits for its next token
    temperature_B: torch.Tensor
    top_k_B: torch.Tensor
    top_p_B: torch.Tensor
    slots_B: torch.Tensor  # each row's LoRA adapter slot (0: none)

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def width(self) -> int:
        return int(self.attn_BT.shape[1])

    def merge(self, other: DecodeBatch) -> None:
        """Append ``other``'s rows (newcomers, just prefilled) to this batch, padding the narrower cache on
        the left so both share one width."""
        width = max(self.width, other.width)
        self._pad_left(width - self.width)
        other._pad_left(width - other.width)
        for mine, theirs in zip(_layers(self.cache), _layers(other.cache), strict=True):
            mine.keys = torch.cat([mine.keys, theirs.keys])
            mine.values = torch.cat([mine.values, theirs.values])
        self.rows = self.rows + other.rows
        for name in _BATCH_TENSORS:
            setattr(self, name, torch.cat([getattr(self, name), getattr(other, name)]))

    def select(self, keep: list[int]) -> None:
        """Keep only the rows at positions ``keep`` (in that order), then cut the leading columns no kept row
        uses."""
        if len(keep) == len(self.rows):
            return
        idx = torch.tensor(keep, dtype=torch.long, device=self.attn_BT.device)
        self.cache.batch_select_indices(idx)
        self.rows = [self.rows[i] for i in keep]
        for name in _BATCH_TENSORS:
            setattr(self, name, getattr(self, name)[idx])
        used = self.attn_BT.any(dim=0)
        first = int(used.long().argmax()) if bool(used.any()) else 0
        if first > 0:
            self.attn_BT = self.attn_BT[:, first:]
            for layer in _layers(self.cache):
                layer.keys = layer.keys[:, :, first:]
                layer.values = layer.values[:, :, first:]

    def _pad_left(self, n: int) -> None:
        if n <= 0:
            return
        self.attn_BT = torch.nn.functional.pad(self.attn_BT, (n, 0))
        for layer in _layers(self.cache):
            layer.keys = torch.nn.functional.pad(layer.keys, (0, 0, n, 0))
            layer.values = torch.nn.functional.pad(layer.values, (0, 0, n, 0))


# The per-row tensors merged and selected with the rows (the cache's layers are handled on their own).
_BATCH_TENSORS = ("attn_BT", "next_pos_B1", "logits_BV", "temperature_B", "top_k_B", "top_p_B", "slots_B")


ROOM = 64  # free columns a RoomyLayer keeps after its last one: one copy of the cache per ROOM decode steps


class RoomyLayer(DynamicLayer):
    """A ``DynamicLayer`` whose keys and values are views of a buffer with free columns after the last one:
    ``update`` writes the new columns into the buffer instead of concatenating (module docstring). Whoever
    assigns ``keys``/``values`` a tensor of their own (a merge, a select, padding) just does so; the next
    ``update`` sees they are no longer its views and copies them into a fresh buffer."""

    _views: tuple[torch.Tensor, torch.Tensor] | None = None  # the (keys, values) views update last handed out
    _buffers: tuple[torch.Tensor, torch.Tensor] | None = None

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        used, new = self.get_seq_length(), key_states.shape[-2]
        ours = self._views is not None and self._views[0] is self.keys and self._views[1] is self.values
        if not ours or self._buffers is None or used + new > self._buffers[0].shape[-2]:
            shape = list(key_states.shape)
            shape[-2] = used + new + ROOM
            buf_k = key_states.new_empty(shape)
            buf_v = value_states.new_empty([*shape[:-1], value_states.shape[-1]])
            if used:
                buf_k[:, :, :used] = self.keys
                buf_v[:, :, :used] = self.values
            self._buffers = (buf_k, buf_v)
        buf_k, buf_v = self._buffers
        buf_k[:, :, used : used + new] = key_states
        buf_v[:, :, used : used + new] = value_states
        self.keys, self.values = buf_k[:, :, : used + new], buf_v[:, :, : used + new]
        self._views = (self.keys, self.values)
        return self.keys, self.values


def new_cache() -> DynamicCache:
    """An empty cache whose layers are :class:`RoomyLayer` (created as the model's layers first write)."""
    cache = DynamicCache()
    cache.layer_class_to_replicate = RoomyLayer
    return cache


def _layers(cache: DynamicCache) -> list[DynamicLayer]:
    """The cache's layers, checked to be plain growing layers (``[B, heads, T, head_dim]`` keys and values,
    every column kept): the only kind whose columns line up with the attention mask's."""
    layers = list(cache.layers)
    for layer in layers:
        if type(layer) not in (DynamicLayer, RoomyLayer):
            raise NotImplementedError(
                f"the local engine's continuous batching needs plain DynamicLayer KV caches, not "
                f"{type(layer).__name__}"
            )
    return layers
