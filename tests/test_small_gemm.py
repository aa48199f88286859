"""The local engine's small-batch float32 GEMM (rllm.inference.small_gemm): built with this machine's
compiler, it computes ``x @ W.T`` as ``F.linear`` does for 1-8 rows, the engine routes exactly its 3-8-row
products to it, and a decode through it samples what torch's GEMM samples. The speed it buys is in
docs/results.md; here only what it computes, and how it fails."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
from pathlib import Path

import pytest
import torch
from torch import nn

from rllm.inference import small_gemm as sg
from rllm.inference.base import SamplingParams
from rllm.inference.local import LocalEngine

# No skip without a compiler: these tests build the kernel (g++, as CI's machine has) and fail where they
# cannot. The engine itself falls back to torch's GEMM with a warning (tested below).


@pytest.mark.parametrize("rows", range(1, 9))
@pytest.mark.parametrize(("n", "k"), [(576, 576), (50, 37), (7, 1536), (1, 16), (193, 64)])
def test_small_gemm_equals_f_linear(rows: int, n: int, k: int) -> None:
    gen = torch.Generator().manual_seed(rows * 1000 + n + k)
    x = torch.randn(rows, k, generator=gen)
    weight = torch.randn(n, k, generator=gen)
    torch.testing.assert_close(
        sg.small_gemm(x, weight), nn.functional.linear(x, weight), rtol=1e-5, atol=1e-4
    )


def test_small_gemm_keeps_leading_dims_and_refuses_what_it_cannot_compute() -> None:
    weight = torch.randn(12, 32)
    x = torch.randn(4, 1, 32)  # a decode step's [B, 1, hidden]
    y = sg.small_gemm(x, weight)
    assert y.shape == (4, 1, 12)
    torch.testing.assert_close(y, nn.functional.linear(x, weight), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="1 to 8 rows"):
        sg.small_gemm(torch.randn(9, 32), weight)
    with pytest.raises(ValueError, match="float32"):
        sg.small_gemm(torch.randn(2, 32, dtype=torch.bfloat16), weight)
    with pytest.raises(ValueError, match="contiguous"):
        sg.small_gemm(torch.randn(2, 32), torch.randn(32, 12).t())


def test_the_build_is_cached_per_machine_and_shares_torchs_openmp() -> None:
    sg.load()
    path = sg.library_path(shutil.which(os.environ.get("CXX", "g++")) or "g++")
    assert path.exists() and path.parent.name == "kernels"
    mtime = path.stat().st_mtime_ns
    sg.load.cache_clear()
    sg.load()  # a second process (or this one, again) loads the build instead of compiling it again
    assert path.stat().st_mtime_ns == mtime
    with open("/proc/self/maps") as maps:
        gomp = {line.split()[-1] for line in maps if "libgomp" in line}
    assert len(gomp) == 1, f"two OpenMP runtimes, two thread pools: {gomp}"


def test_linears_route_three_to_eight_rows_without_grad_to_the_kernel() -> None:
    gen = torch.Generator().manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 24), nn.Linear(24, 8, bias=False))
    linears = sg.SmallBatchLinears(model)
    assert len(linears.layers) == 2
    for rows, through_kernel in [(1, 0), (2, 0), (3, 2), (8, 2), (9, 0)]:
        x = torch.randn(rows, 32, generator=gen)
        before = linears.calls
        with torch.no_grad():
            ours = model(x)
            linears.active = False
            theirs = model(x)
            linears.active = True
        assert linears.calls - before == through_kernel, rows
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
    before = linears.calls
    model(torch.randn(4, 32, generator=gen)).sum().backward()  # training: autograd needs torch's op
    assert linears.calls == before and model[0].weight.grad is not None


def test_engine_decodes_through_the_kernel_as_through_torchs_gemm(tiny_model_dir: Path) -> None:
    engine = LocalEngine.from_pretrained(str(tiny_model_dir), device="cpu", dtype="float32")
    try:
        assert engine.small_gemm is not None
        tok = engine.tokenizer
        prompts = [tok.encode(p) for p in ("The capital of France is", "1 2 3 4 5", "Once upon a time", "Hi")]
        params = SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True)

        async def batch() -> list:
            outs = await asyncio.gather(*(engine.generate(p, params) for p in prompts * 2))  # 8 rows
            return [c for (c,) in outs]

        before = engine.small_gemm.calls
        ours = asyncio.run(batch())
        assert engine.small_gemm.calls > before
        engine.small_gemm.active = False
        theirs = asyncio.run(batch())
        for a, b in zip(ours, theirs, strict=True):
            assert a.completion_ids == b.completion_ids
            torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4, rtol=0)
    finally:
        engine.close()


def test_without_a_compiler_the_engine_warns_once_and_keeps_torchs_gemm(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("CXX", "no-such-compiler-rllm")
    sg.load.cache_clear()
    try:
        with pytest.raises(sg.SmallGemmUnavailable, match="no C\\+\\+ compiler 'no-such-compiler-rllm'"):
            sg.load()
        with caplog.at_level(logging.WARNING, logger="rllm.inference.small_gemm"):
            engine = LocalEngine.from_pretrained(str(tiny_model_dir), device="cpu", dtype="float32")
        try:
            assert engine.small_gemm is None
            assert (
                "small-batch CPU GEMM unavailable" in caplog.text and "no-such-compiler-rllm" in caplog.text
            )
            (c,) = engine.generate_sync(engine.tokenizer.encode("1 2 3"), SamplingParams(max_tokens=4))
            assert len(c.completion_ids) == 4
        finally:
            engine.close()
    finally:
        sg.load.cache_clear()


def test_a_failed_build_says_what_the_compiler_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = tmp_path / "broken.cpp"
    bad.write_text("this is not C++\n")
    monkeypatch.setattr(sg, "SOURCE", bad)
    target = tmp_path / "out.so"
    with pytest.raises(sg.SmallGemmUnavailable, match="failed on broken.cpp"):
        sg.build(shutil.which("g++") or "g++", target)
    assert not target.exists() and not list(tmp_path.glob("*.tmp"))  # nothing half-written left behind


def test_the_environment_switch_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sg.ENV_SWITCH, "0")
    assert sg.install(nn.Linear(8, 8)) is None
    monkeypatch.setenv(sg.ENV_SWITCH, "1")
    assert sg.install(nn.Linear(8, 8)) is not None
