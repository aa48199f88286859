"""The tiny model as a local engine, shared by the workflow tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from rllm.inference.local import LocalEngine


@pytest.fixture(scope="session")
def engine(tiny_model_dir: Path) -> LocalEngine:
    return LocalEngine.from_pretrained(str(tiny_model_dir), device="cpu", dtype="float32")
