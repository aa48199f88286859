"""What the sandbox tests share: whether the real isolation (bubblewrap, as ``auto`` picks it) is here."""

from __future__ import annotations

import os

import pytest

from rllm.sandbox import SandboxUnavailable, protections


def require_bubblewrap() -> None:
    """Return when ``auto`` runs code under bubblewrap here; else skip, or fail when ``CI`` is true."""
    try:
        isolation = protections()["isolation"]
    except SandboxUnavailable as e:
        problem = str(e)
    else:
        if isolation == "bwrap":
            return
        problem = f"isolation='auto' picked {isolation!r} (RLLM_SANDBOX_ISOLATION is set?), not bubblewrap"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI=true and the sandbox has no real isolation: {problem}", pytrace=False)
    pytest.skip(f"no bubblewrap sandbox here: {problem}")
