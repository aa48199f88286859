"""The arithmetic behind docs/scaling.md: weight-sync bytes for Qwen2.5-1.5B/7B/32B (full weights and LoRA
adapters, computed from the models' published configs) and the time to move them by file and by NCCL
broadcast under stated bandwidths, plus one MEASURED input: this machine's disk bandwidth for a
safetensors file (written with fsync, evicted from the page cache, read back).

Everything but the disk row is an ESTIMATE (bytes / bandwidth); the bandwidths are assumptions printed
with the tables. The byte counts are exact for the configs below.

    .venv/bin/python benchmarks/scaling_estimates.py             # tables + a 1 GiB disk measurement
    .venv/bin/python benchmarks/scaling_estimates.py --quick     # 64 MiB disk measurement
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from _common import header_line, markdown_table


@dataclass(frozen=True)
class Arch:
    """A Qwen2-architecture decoder (QKV bias, SwiGLU MLP, RMSNorm), as its config.json states it."""

    name: str
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    tied: bool

    @property
    def kv_dim(self) -> int:
        return self.hidden // self.heads * self.kv_heads

    def linears(self) -> list[tuple[int, int]]:
        """(in, out) of every linear layer of one block: q, k, v, o, gate, up, down."""
        h, kv, i = self.hidden, self.kv_dim, self.intermediate
        return [(h, h), (h, kv), (h, kv), (h, h), (h, i), (h, i), (i, h)]

    def params(self) -> int:
        h = self.hidden
        block = sum(a * b for a, b in self.linears()) + h + 2 * self.kv_dim + 2 * h  # + qkv bias + 2 norms
        embed = self.vocab * h * (1 if self.tied else 2)
        return self.layers * block + embed + h

    def lora_params(self, rank: int) -> int:
        """LoRA A (r x in) and B (out x r) on every linear layer of every block (PEFT target 'all-linear')."""
        return self.layers * sum(rank * (a + b) for a, b in self.linears())


MODELS = [
    Arch("Qwen2.5-1.5B", 1536, 8960, 28, 12, 2, 151936, True),
    Arch("Qwen2.5-7B", 3584, 18944, 28, 28, 4, 152064, False),
    Arch("Qwen2.5-32B", 5120, 27648, 64, 40, 8, 152064, False),
]
LORA_RANK = 32
# ASSUMED bandwidths (GB/s = 1e9 bytes/s), per path; see docs/scaling.md for where each applies.
FILE_PATHS = {
    "local NVMe (write 2, read 3 GB/s)": (2.0, 3.0),
    "NFS on 25 GbE (write/read 2.5 GB/s, shared by all readers)": (2.5, 2.5),
}
NCCL_PATHS = {
    "NCCL, one node on NVLink (150 GB/s bus bandwidth)": 150.0,
    "NCCL, across nodes on 400 Gb/s InfiniBand (45 GB/s)": 45.0,
}


def measure_disk(directory: Path, size_mib: int) -> tuple[float, float]:
    """(write GB/s with fsync, read GB/s from disk) of one safetensors file of ``size_mib`` MiB in bf16."""
    import torch
    from safetensors.torch import load_file, save_file

    path = directory / "disk-probe.safetensors"
    tensor = torch.randn(size_mib * 2**20 // 2, dtype=torch.float32).to(torch.bfloat16)
    try:
        t0 = time.perf_counter()
        save_file({"w": tensor}, str(path))
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            write_s = time.perf_counter() - t0
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # evict it: the read must come from the disk
        finally:
            os.close(fd)
        t0 = time.perf_counter()
        loaded = load_file(str(path))["w"]
        loaded.sum()  # touch every page (safetensors maps the file lazily)
        read_s = time.perf_counter() - t0
    finally:
        path.unlink(missing_ok=True)
    size = tensor.numel() * 2 / 1e9
    return size / write_s, size / read_s


def gb(n_bytes: float) -> str:
    return f"{n_bytes / 1e9:.2f} GB" if n_bytes >= 1e9 else f"{n_bytes / 1e6:.0f} MB"


def secs(s: float) -> str:
    return f"{s * 1000:.0f} ms" if s < 1 else f"{s:.1f} s" if s < 100 else f"{s / 60:.1f} min"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a 64 MiB disk probe instead of 1 GiB")
    p.add_argument(
        "--dir", default=tempfile.gettempdir(), help="where the disk probe file goes (default: temp)"
    )
    p.add_argument(
        "--readers",
        default="8,64,512",
        help="servers reading one file from the shared NFS store "
        "(default: 8,64,512: one server per GPU at 8, 64 and 512 GPUs)",
    )
    args = p.parse_args()
    write_gbs, read_gbs = measure_disk(Path(args.dir), 64 if args.quick else 1024)
    print(header_line())
    print(
        f"MEASURED disk here ({args.dir}): safetensors write + fsync {write_gbs:.2f} GB/s, read from disk "
        f"{read_gbs:.2f} GB/s\n"
    )
    rows = []
    for m in MODELS:
        full, lora = m.params() * 2, m.lora_params(LORA_RANK) * 4
        rows.append(
            [
                m.name,
                f"{m.params() / 1e9:.2f} B",
                gb(full),
                f"{m.lora_params(LORA_RANK) / 1e6:.1f} M",
                gb(lora),
            ]
        )
    print(
        markdown_table(
            [
                "model",
                "parameters",
                "full weights (bf16)",
                f"LoRA r={LORA_RANK} params",
                f"LoRA r={LORA_RANK} adapter (fp32)",
            ],
            rows,
        )
    )
    readers = [int(r) for r in args.readers.split(",")]
    paths = {"this machine's disk (measured above)": (write_gbs, read_gbs), **FILE_PATHS}
    print(
        "\nESTIMATES, by file: trainer rank 0 writes once, then N servers read it (a local disk: each node "
        "its own copy, N = 1; shared NFS: N readers share its bandwidth)"
    )
    rows = []
    for m in MODELS:
        for what, size in (("full", m.params() * 2), (f"LoRA r={LORA_RANK}", m.lora_params(LORA_RANK) * 4)):
            cells = [m.name, what]
            for name, (w, r) in paths.items():
                ns = [1] if "NFS" not in name else readers
                cells.append(" / ".join(secs(size / (w * 1e9) + n * size / (r * 1e9)) for n in ns))
            rows.append(cells)
    print(
        markdown_table(
            [
                "model",
                "weights",
                *[f"{k} (N={','.join(map(str, readers)) if 'NFS' in k else 1})" for k in paths],
            ],
            rows,
        )
    )
    print(
        "\nESTIMATES, by NCCL broadcast from trainer rank 0 into every server's ranks (pipelined: about "
        "bytes / bus bandwidth, whatever the number of receivers)"
    )
    rows = [
        [m.name, what, *[secs(size / (bw * 1e9)) for bw in NCCL_PATHS.values()]]
        for m in MODELS
        for what, size in (("full", m.params() * 2), (f"LoRA r={LORA_RANK}", m.lora_params(LORA_RANK) * 4))
    ]
    print(markdown_table(["model", "weights", *NCCL_PATHS], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
