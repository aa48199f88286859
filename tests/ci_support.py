"""Skip here, fail under CI: the one rule for a test whose tool, package or server is missing.

On a developer's machine such a test skips, saying what is missing and the command that installs it. Where
the piece must be there it fails instead, because a skip there would pass a broken set-up green:

- under ``CI=true`` (``.ci/run`` sets it), for what every CI tier that runs the test installs: the base
  set-up with the ``test`` extra and bubblewrap (the fast tier), and what a marked tier's own set-up
  installs for its tests (``-m vllm``: vLLM; ``-m distributed``: Ray);
- when ``$RLLM_TEST_EXTRAS`` (comma-separated) names the test's ``extra``, for a piece that only one tier
  installs while the fast tier runs the same test without it (``deploy-tests``, ``strands``, ``ui-tests``).

tests/test_ci_support.py runs a test file in a subprocess to show that the rule bites.
"""

from __future__ import annotations

import functools
import importlib
import os
import subprocess
from pathlib import Path
from types import ModuleType
from typing import NoReturn

import pytest

from rllm.inference.vllm_server import default_vllm_python

VLLM_SETUP_HINT = "bash scripts/setup_vllm.sh (or point RLLM_VLLM_VENV at a venv with vllm)"


def under_ci() -> bool:
    """Whether ``$CI`` says this is a CI run (``.ci/run`` sets ``CI=true``)."""
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def extra_required(extra: str) -> bool:
    """Whether ``$RLLM_TEST_EXTRAS`` names ``extra``: the tier that runs this test installed it."""
    return extra in os.environ.get("RLLM_TEST_EXTRAS", "").split(",")


def skip_or_fail(reason: str, *, extra: str | None = None) -> NoReturn:
    """Skip the calling test (or its module, when called at import time) because of ``reason``; fail it
    instead where the missing piece must be there: under ``CI=true``, or, for a piece of the optional
    ``extra``, only when ``$RLLM_TEST_EXTRAS`` names it.

    ``reason`` says what is missing and how to install it: ``"no vLLM venv at X: bash scripts/..."``."""
    __tracebackhide__ = True  # pytest reports the caller's line, not this one
    if extra is None and under_ci():
        pytest.fail(f"{reason} (CI=true: CI installs it, so this fails instead of skipping)", pytrace=False)
    if extra is not None and extra_required(extra):
        pytest.fail(
            f"{reason} (RLLM_TEST_EXTRAS names {extra}, so this fails instead of skipping)", pytrace=False
        )
    pytest.skip(reason, allow_module_level=True)


def require_import(module: str, install: str, *, extra: str | None = None) -> ModuleType:
    """``module``, imported; else :func:`skip_or_fail`, naming ``install`` (the command that installs it)."""
    __tracebackhide__ = True
    try:
        return importlib.import_module(module)
    except ImportError as e:
        skip_or_fail(f"{module} does not import ({e}): {install}", extra=extra)


def require_vllm() -> Path:
    """The Python of the vLLM venv the tests start servers from (``default_vllm_python()``: the venv of
    ``$RLLM_VLLM_VENV``, else ``.venv-vllm``), with vllm installed in it; else :func:`skip_or_fail`.

    tests/conftest.py calls it before every test marked ``vllm``, ahead of the test's fixtures, so a
    vLLM-tier test needs only the marker."""
    __tracebackhide__ = True
    python = default_vllm_python()
    problem = _vllm_problem(python)
    if problem:
        skip_or_fail(f"{problem}: {VLLM_SETUP_HINT}")
    return python


@functools.cache
def _vllm_problem(python: Path) -> str | None:
    """Why ``python`` cannot run vLLM (None when it can). Looks vllm up without importing it (an import
    takes seconds): a vllm that is there but broken fails the test when its server starts."""
    if not python.exists():
        return f"no vLLM venv at {python.parent.parent}"
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('vllm') is None)"
    found = subprocess.run([str(python), "-c", probe], capture_output=True, timeout=120, check=False)
    if found.returncode != 0:
        return f"vllm is not installed in the venv of {python}"
    return None
