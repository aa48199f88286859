"""The sandbox tests need the real isolation: bubblewrap, as ``isolation="auto"`` picks it.

Where it is missing or does not work they skip, naming the fix, except under ``CI=true``: there a missing
isolation fails the suite, so that an escape suite that guards the sandbox can never pass by skipping.
"""

from __future__ import annotations

import pytest
from sandbox_support import require_bubblewrap


@pytest.fixture
def bubblewrap() -> None:
    """Skips (fails under CI=true) the test unless the sandbox runs under bubblewrap."""
    require_bubblewrap()
