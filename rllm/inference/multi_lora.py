"""Several LoRA adapters served at once over one set of unmerged base weights, the adapter picked per row.

Each adapted ``nn.Linear`` of the engine's model is wrapped in a :class:`MultiLoRALinear` that computes,
for row ``b`` of the batch with adapter ``i = index_B[b]``::

    y_b = base(x_b) + (x_b @ A_i^T) @ (s_i * B_i)^T

with ``A_i`` the adapter's ``lora_A`` weight ``[r, in]``, ``B_i`` its ``lora_B`` weight ``[out, r]`` and ``s_i``
its scaling (``lora.alpha / lora.rank``, folded into the stored ``B`` once at load time). The K adapters of
a module are stacked along the rank (``A_CI``: ``[K * r, in]``, ``B_OC``: ``[out, K * r]``, every rank
zero-padded to the largest, ``C = K * r``), and each row keeps only its own adapter's ``r`` columns of the
low-rank activations (a ``[B, C]`` 0/1 mask built from the per-row index)::

    y = base(x) + ((x @ A_CI^T) * mask_BC) @ B_OC^T

so one decode batch mixes rows of different adapters in two dense matmuls per module, the same for every
row (the punica / S-LoRA idea in plain torch; on CPU, two GEMMs of inner size ``K * r`` beat gathering a
``[B, r, in]`` copy of the adapters per row and a batched matmul of tiny matrices). Index 0 means no
adapter: its row's mask is all zeros, so it gets the base weights only. When no row of a batch has an
adapter the delta is skipped.

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
    """The running batch's mask of low-rank columns per row (``[B, K * r]``), shared by every wrapped
    module (they all stack the same K adapters at the same padded rank ``r``)."""

    def __init__(self) -> None:
        self.mask_BC: torch.Tensor | None = None  # None: no row has an adapter (the delta is skipped)


class MultiLoRALinear(nn.Module):
    """An ``nn.Linear`` plus a per-row choice of LoRA delta (see the module docstring)."""

    def __init__(self, base: nn.Linear, rows: _RowIndex) -> None:
        super().__init__()
        self.base = base
        self.rows = rows
        dev, dtype = base.weight.device, base.weight.dtype
        self.register_buffer("A_CI", torch.zeros(0, base.in_features, device=dev, dtype=dtype))
        self.register_buffer("B_OC", torch.zeros(base.out_features, 0, device=dev, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.base(x)
        mask_BC = self.rows.mask_BC
        if mask_BC is None:
            return y
        # x: [B, T, in] -> [B, T, C], each row's own adapter's columns kept -> [B, T, out].
        h_BTC = (x.to(self.A_CI.dtype) @ self.A_CI.T) * mask_BC[:, None, :]
        return y + (h_BTC @ self.B_OC.T).to(y.dtype)


class AdapterSet:
    """The named LoRA adapters of one model, stacked per adapted module; slot 0 is "no adapter"."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.rows = _RowIndex()
        self.slots: dict[str, int] = {}  # adapter name -> slot (1..K)
        self.rank = 1  # every adapter's rank is zero-padded to this (the largest loaded)
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
        if slots_B is None or not bool(slots_B.any()):
            self.rows.mask_BC = None
            return
        # Column c belongs to slot c // rank + 1.
        col_slot_C = torch.arange(len(self.slots) * self.rank, device=slots_B.device) // self.rank + 1
        dtype = next(iter(self.modules.values())).A_CI.dtype
        self.rows.mask_BC = (slots_B[:, None] == col_slot_C[None, :]).to(dtype)

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
        """Rebuild every adapted module's stacks from the adapters' tensors (slot order, ranks zero-padded
        to the largest of all, so one per-row column mask fits every module)."""
        module_names = sorted({m for per in self._tensors.values() for m in per} | set(self.modules))
        r = max([1] + [a.shape[0] for per in self._tensors.values() for a, _ in per.values()])
        self.rank = r
        for module_name in module_names:
            wrapped = self._wrap(module_name)
            base = wrapped.base
            dev, dtype = base.weight.device, base.weight.dtype
            a_CI = torch.zeros(len(self.slots) * r, base.in_features, device=dev, dtype=dtype)
            b_OC = torch.zeros(base.out_features, len(self.slots) * r, device=dev, dtype=dtype)
            for name, slot in self.slots.items():
                pair = self._tensors[name].get(module_name)
                if pair is not None:
                    a, b = pair
                    start = (slot - 1) * r
                    a_CI[start : start + a.shape[0]] = a
                    b_OC[:, start : start + a.shape[0]] = b
            wrapped.A_CI, wrapped.B_OC = a_CI, b_OC
