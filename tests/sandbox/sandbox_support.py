"""What the sandbox tests share: whether the real isolation (bubblewrap, as ``auto`` picks it) is here."""

from __future__ import annotations

from ci_support import skip_or_fail

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
    skip_or_fail(f"no bubblewrap sandbox here: {problem}")
