"""Several LoRA adapters served at once over one set of unmerged base weights, the adapter picked per row.

Each adapted ``nn.Linear`` of the engine's model is wrapped in a :class:`MultiLoRALinear` that computes,
for row ``b`` of the batch with adapter ``i = index_B[b]``::

    y_b = base(x_b) + (x_b @ A_i^T) @ (s_i * B_i)^T

with ``A_i`` the adapter's ``lora_A`` weight ``[r, in]``, ``B_i`` its ``lora_B`` weight ``[out, r]`` and ``s_i``
its scaling (``lora.alpha / lora.rank``, folded into the stored ``B`` once at load time). The adapters of a
module are stacked (``A_KRI``: ``[K, r_max, in]``, ``B_KOR``: ``[K, out, r_max]``, ranks zero-padded to the
largest) and gathered by the per-row index, so one decode batch mixes rows of different adapters in two
batched matmuls (the punica / S-LoRA idea in plain torch). Slot 0 is all zeros: a row without an adapter
(``index = 0``) gets the base weights only. When no row of a batch has an adapter the delta is skipped.

:class:`AdapterSet` owns the wrapped modules and the name -> slot map; the engine sets the batch's per-row
index (:meth:`AdapterSet.set_rows`) before every forward pass, from its decode thread only.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

# adapter name -> base-model module name (as in the plain Hugging Face model) -> (lora_A [r, in], lora_B [out, r])
AdapterTensors = Mapping[str, Mapping[str, tuple[torch.Tensor, torch.Tensor]]]


class _RowIndex:
    """The running batch's adapter slot per row (``[B]`` long tensor), shared by every wrapped module."""

    def __init__(self) -> None:
        self.index_B: torch.Tensor | None = None  # None: no row has an adapter (the delta is skipped)


class MultiLoRALinear(nn.Module):
    """An ``nn.Linear`` plus a per-row choice of LoRA delta (see the module docstring)."""

    def __init__(self, base: nn.Linear, rows: _RowIndex) -> None:
        super().__init__()
        self.base = base
        self.rows = rows
        dev, dtype = base.weight.device, base.weight.dtype
        # Slot 0 only (zeros) until load: [K, r, in] and [K, out, r].
        self.register_buffer("A_KRI", torch.zeros(1, 1, base.in_features, device=dev, dtype=dtype))
        self.register_buffer("B_KOR", torch.zeros(1, base.out_features, 1, device=dev, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.base(x)
        index_B = self.rows.index_B
        if index_B is None:
            return y
        # x: [B, T, in]. Gather each row's adapter, then two batched matmuls: [B,T,in]x[B,in,r]x[B,r,out].
        a_BIR = self.A_KRI[index_B].transpose(1, 2)
        b_BRO = self.B_KOR[index_B].transpose(1, 2)
        return y + torch.bmm(torch.bmm(x.to(a_BIR.dtype), a_BIR), b_BRO).to(y.dtype)


class AdapterSet:
    """The named LoRA adapters of one model, stacked per adapted module; slot 0 is "no adapter"."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.rows = _RowIndex()
        self.slots: dict[str, int] = {}  # adapter name -> slot (1..K)
        # adapter name -> module name -> (A, s * B), kept so a later load of other adapters can restack.
        self._tensors: dict[str, dict[str, tuple[torch.Tensor, torch.Tensor]]] = {}
        self.modules: dict[str, MultiLoRALinear] = {}

    @property
    def names(self) -> list[str]:
        return list(self.slots)

    def load(self, adapters: AdapterTensors, *, scaling: float) -> None:
        """Add or replace the adapters named in ``adapters`` (others stay as they are). Raises ``ValueError``
        naming the module when a name is not an ``nn.Linear`` of the model or a shape does not fit it; on any
        error nothing changes."""
        staged: dict[str, dict[str, tuple[torch.Tensor, torch.Tensor]]] = {}
        for name, per_module in adapters.items():
            if not isinstance(name, str) or not name:
                raise ValueError(f"an adapter name must be a non-empty string, not {name!r}")
            staged[name] = {}
            for module_name, (a, b) in per_module.items():
                linear = self._linear(module_name)
                if a.dim() != 2 or b.dim() != 2 or a.shape[0] != b.shape[1]:
                    raise ValueError(
                        f"adapter {name!r}, module {module_name}: lora_A must be [r, in] and lora_B [out, r] "
                        f"with the same r, got {tuple(a.shape)} and {tuple(b.shape)}"
                    )
                if a.shape[1] != linear.in_features or b.shape[0] != linear.out_features:
                    raise ValueError(
                        f"adapter {name!r}, module {module_name}: lora_A {tuple(a.shape)} / lora_B "
                        f"{tuple(b.shape)} do not fit a Linear of {linear.in_features} -> {linear.out_features}"
                    )
                w = linear.weight
                staged[name][module_name] = (
                    a.detach().to(device=w.device, dtype=w.dtype, copy=True),
                    (b.detach().to(device=w.device, dtype=torch.float32) * scaling).to(w.dtype),
                )
        for name in staged:
            self.slots.setdefault(name, len(self.slots) + 1)
        self._tensors.update(staged)
        self._restack()

    def set_rows(self, slots_B: torch.Tensor | None) -> None:
        """The running batch's slot per row (0: no adapter); None or all zeros skips the delta."""
        self.rows.index_B = None if slots_B is None or not bool(slots_B.any()) else slots_B

    def slot(self, name: str | None) -> int:
        """The slot of adapter ``name`` (0 for None); ``ValueError`` naming the loaded ones if unknown."""
        if name is None:
            return 0
        try:
            return self.slots[name]
        except KeyError:
            loaded = ", ".join(sorted(self.slots)) or "none"
            raise ValueError(f"unknown adapter {name!r}: the engine has loaded {loaded}") from None

    def _linear(self, module_name: str) -> nn.Linear:
        wrapped = self.modules.get(module_name)
        if wrapped is not None:
            return wrapped.base
        try:
            module = self.model.get_submodule(module_name)
        except AttributeError:
            raise ValueError(f"the engine's model has no module {module_name!r} to adapt") from None
        if not isinstance(module, nn.Linear):
            raise ValueError(  # noqa: TRY004 (a bad module name in the input, as the missing one above)
                f"{module_name} is a {type(module).__name__}, not an nn.Linear: it cannot be adapted"
            )
        return module

    def _wrap(self, module_name: str) -> MultiLoRALinear:
        wrapped = self.modules.get(module_name)
        if wrapped is None:
            parent_name, _, child = module_name.rpartition(".")
            parent = self.model.get_submodule(parent_name) if parent_name else self.model
            wrapped = MultiLoRALinear(getattr(parent, child), self.rows)
            setattr(parent, child, wrapped)
            self.modules[module_name] = wrapped
        return wrapped

    def _restack(self) -> None:
        """Rebuild every adapted module's stacks from the adapters' tensors (slot order, ranks zero-padded)."""
        module_names = sorted({m for per in self._tensors.values() for m in per} | set(self.modules))
        k = len(self.slots) + 1
        for module_name in module_names:
            wrapped = self._wrap(module_name)
            base = wrapped.base
            pairs = {n: self._tensors[n].get(module_name) for n in self.slots}
            r = max([1] + [p[0].shape[0] for p in pairs.values() if p is not None])
            dev, dtype = base.weight.device, base.weight.dtype
            a_KRI = torch.zeros(k, r, base.in_features, device=dev, dtype=dtype)
            b_KOR = torch.zeros(k, base.out_features, r, device=dev, dtype=dtype)
            for name, pair in pairs.items():
                if pair is not None:
                    a, b = pair
                    a_KRI[self.slots[name], : a.shape[0]] = a
                    b_KOR[self.slots[name], :, : a.shape[0]] = b
            wrapped.A_KRI, wrapped.B_KOR = a_KRI, b_KOR
