"""The declared public surface: ``rllm.__all__`` and each subpackage's ``__all__`` name real things, and
declaring them costs nothing at import (no torch until a name that needs it is touched)."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import pytest

import rllm


def _packages() -> list[str]:
    return ["rllm"] + sorted(
        info.name for info in pkgutil.walk_packages(rllm.__path__, "rllm.") if info.ispkg
    )


def test_every_name_in_rllm_all_resolves_to_what_its_home_module_defines() -> None:
    for name in rllm.__all__:
        assert getattr(rllm, name) is not None, name
    assert len(set(rllm.__all__)) == len(rllm.__all__)
    # The types users' code touches are the ones the rest of rllm uses, not copies.
    from rllm.runner.context import RolloutContext
    from rllm.sdk.decorators import evaluator, rollout
    from rllm.types import Episode, Outcome, Step, Trajectory

    assert (rllm.Outcome, rllm.RolloutContext, rllm.Episode) == (Outcome, RolloutContext, Episode)
    assert (rllm.Trajectory, rllm.Step, rllm.rollout, rllm.evaluator) == (
        Trajectory,
        Step,
        rollout,
        evaluator,
    )


@pytest.mark.parametrize("package", _packages())
def test_every_subpackage_declares_its_public_names_and_each_resolves(package: str) -> None:
    module = importlib.import_module(package)
    assert "__all__" in vars(module), f"{package}/__init__.py declares no __all__"
    names = module.__all__
    assert len(set(names)) == len(names), f"{package}.__all__ lists a name twice"
    missing = [n for n in names if getattr(module, n, None) is None]
    assert not missing, f"{package}.__all__ names what it does not define: {missing}"
    assert set(names) <= set(dir(module))


@pytest.mark.parametrize(
    ("package", "typo", "meant"),
    [("rllm", "Outcom", "Outcome"), ("rllm.trainer", "AgentTrainr", "AgentTrainer")],
)
def test_an_unknown_public_name_fails_with_a_did_you_mean(package: str, typo: str, meant: str) -> None:
    code = f"import {package}; {package}.{typo}"
    result = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True)
    last = result.stderr.strip().splitlines()[-1]
    assert last == f"AttributeError: module {package!r} has no attribute {typo!r}. Did you mean: {meant!r}?"


def test_importing_rllm_and_every_subpackage_loads_no_torch() -> None:
    code = (
        "import importlib, sys\n"
        f"for name in {_packages()!r}:\n"
        "    importlib.import_module(name)\n"
        "    assert 'torch' not in sys.modules, f'import {name} loaded torch'\n"
        "import rllm\n"
        "assert rllm.TrainConfig.__name__ == 'TrainConfig'  # resolves on first use\n"
    )
    result = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
