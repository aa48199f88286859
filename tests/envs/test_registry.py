"""The environment registry: entries refuse bad registrations, installed packages plug in through the
``rllm.envs`` entry-point group, and no module outside ``rllm/envs/`` names a concrete environment."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from rllm.data.registry import DatasetRegistry
from rllm.envs import EnvOptions, UnknownEnvError, env_names, get_env, register_env, unregister_env
from rllm.envs import registry as env_registry
from rllm.envs.frozenlake import FrozenLakeEnv, FrozenLakeOptions

REPO = Path(__file__).resolve().parents[2]


def _no_tasks(split: str, n: int, seed: int) -> list[dict]:
    return []


def test_frozenlake_registers_itself_with_its_options_and_eval_behaviour() -> None:
    spec = get_env("frozenlake")
    assert spec.options is FrozenLakeOptions and "frozenlake" in env_names()
    assert spec.make_options(**spec.eval_options).model_dump() == {
        "max_turns": 5,
        "invalid_action_reward": 0.0,
        "history_turns": 0,
    }
    task = spec.tasks("test", 1, 0)[0]
    assert isinstance(spec.env(task, spec.make_options()), FrozenLakeEnv)
    assert DatasetRegistry().info("frozenlake").reward is None  # the environment scores itself


def test_unknown_names_and_bad_registrations_are_refused_in_one_line() -> None:
    with pytest.raises(
        UnknownEnvError, match=r"unknown environment 'frozenlak' — did you mean 'frozenlake'\?"
    ):
        get_env("frozenlak")
    with pytest.raises(ValueError, match="'frozenlake' is already registered: pass replace=True"):
        register_env("frozenlake", env=FrozenLakeEnv, agent=lambda o: None, tasks=_no_tasks)  # type: ignore[arg-type,return-value]
    with pytest.raises(TypeError, match="options must subclass rllm.envs.EnvOptions"):
        register_env("other", env=FrozenLakeEnv, agent=lambda o: None, tasks=_no_tasks, options=dict)  # type: ignore[arg-type,return-value]
    with pytest.raises(ValueError, match="environment 'other' has no option 'history_turns'"):
        register_env(  # eval options are checked at registration, not at the first eval
            "other",
            env=FrozenLakeEnv,
            agent=lambda o: None,
            tasks=_no_tasks,
            eval_options={"history_turns": 0},  # type: ignore[arg-type,return-value]
        )
    with pytest.raises(ValueError, match="option 'max_turns': Input should be greater than 0, got 0"):
        get_env("frozenlake").make_options(max_turns=0)
    assert "other" not in env_names()


@pytest.fixture
def installed_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A package on sys.path that declares a module in the ``rllm.envs`` entry-point group."""
    (tmp_path / "plugged_env.py").write_text(
        textwrap.dedent(
            """
            from rllm.envs import EnvOptions, register_env
            from rllm.envs.frozenlake import FrozenLakeEnv, FrozenLakeAgent

            class PluggedOptions(EnvOptions):
                size: int = 3

            register_env(
                "plugged",
                env=FrozenLakeEnv,
                agent=lambda options: FrozenLakeAgent(),
                tasks=lambda split, n, seed: [],
                options=PluggedOptions,
            )
            """
        )
    )
    dist = tmp_path / "plugged_env-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: plugged-env\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[rllm.envs]\nplugged = plugged_env\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(env_registry.ENVS, "_entry_points_loaded", False)  # look again, with it installed
    yield tmp_path
    unregister_env("plugged")


def test_an_installed_package_registers_through_the_entry_point_group(installed_plugin: Path) -> None:
    spec = get_env("plugged")
    assert spec.make_options(size=5).size == 5 and issubclass(spec.options, EnvOptions)
    assert DatasetRegistry(installed_plugin / "datasets").exists("plugged")  # its task family, by name


def test_no_module_outside_envs_names_an_environment() -> None:
    package = REPO / "rllm"
    naming = [
        str(path.relative_to(package))
        for path in package.rglob("*")
        if path.is_file()
        and path.suffix in {".py", ".md", ".html", ".js", ".css", ".json", ".yaml", ".txt"}
        and path.relative_to(package).parts[0] != "envs"
        and "frozenlake" in path.read_text(encoding="utf-8", errors="replace").lower()
    ]
    assert naming == []
