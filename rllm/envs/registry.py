"""Environments by name: what ``workflow.name=<env>`` trains and ``rllm eval <env>`` plays.

An entry ties together everything the library needs to run an environment without naming it anywhere
else: how to build the environment and the agent for one task, the options the environment owns (a
pydantic model; they are the ``workflow.*`` keys of a run that plays it), its task family (the generator
behind ``data.task=<env>`` and ``rllm eval <env>``) and how ``rllm eval`` plays it (``eval_options``).
The environment scores itself: its step rewards are the episode's return, and no dataset reward is used.

    class GuessOptions(EnvOptions):
        secret_max: int = Field(9, gt=0, description="guess: numbers run from 1 to this")

    register_env(
        "guess",
        env=lambda task, options: GuessEnv(task["metadata"]["secret"]),
        agent=lambda options: GuessAgent(),
        tasks=guess_tasks,                   # (split, n, seed) -> task rows
        options=GuessOptions,
        description="guess a hidden number (generated)",
    )

Built-in environments register themselves at the bottom of their own module (imported by
``rllm.envs``). The entries live in ``ENVS``, a :class:`rllm.utils.registry.Registry` (docs/plugins.md):
an installed package can name a module that registers, or a ``register*`` function, in the ``rllm.envs``
entry-point group, loaded the first time a name is looked up.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rllm.agents.base import Agent
from rllm.envs.base import Env
from rllm.utils.registry import Registry, UnknownPluginError

__all__ = [
    "ENVS",
    "EnvOptions",
    "EnvSpec",
    "UnknownEnvError",
    "env_names",
    "get_env",
    "is_env",
    "register_env",
    "unregister_env",
]


class EnvOptions(BaseModel):
    """The options of a run that plays an environment: the multi-turn loop's own two, which every
    environment has. An environment with knobs of its own subclasses this and adds them (each with a
    ``description``: it is what ``rllm train --help-config`` prints)."""

    model_config = ConfigDict(extra="forbid")

    max_turns: int = Field(4, gt=0, description="most model turns per episode.")
    invalid_action_reward: float = Field(
        0.0, description="step reward of a reply that names no valid action."
    )


TaskFamily = Callable[[str, int, int], list[dict[str, Any]]]  # (split, n, seed) -> task rows


@dataclass(frozen=True)
class EnvSpec:
    """One registered environment (see the module docstring). ``env(task, options)`` and
    ``agent(options)`` are called once per episode."""

    name: str
    env: Callable[[dict[str, Any], Any], Env]
    agent: Callable[[Any], Agent]
    tasks: TaskFamily
    options: type[EnvOptions] = EnvOptions
    description: str = ""
    default_size: dict[str, int] = field(default_factory=lambda: {"train": 500, "test": 100})
    eval_options: Mapping[str, Any] = field(default_factory=dict)  # how `rllm eval` plays it

    def make_options(self, **values: Any) -> EnvOptions:
        """The options model from ``values`` (unset ones keep their defaults); one-line ValueError
        naming the option when a value is refused or the environment has no such option."""
        try:
            return self.options(**values)
        except ValidationError as exc:
            err = exc.errors(include_url=False)[0]
            key = ".".join(str(part) for part in err["loc"])
            if err["type"] == "extra_forbidden":
                known = ", ".join(self.options.model_fields)
                raise ValueError(
                    f"environment {self.name!r} has no option {key!r}: its options are {known}"
                ) from None
            raise ValueError(
                f"environment {self.name!r} option {key!r}: {err['msg']}, got {err.get('input')!r}"
            ) from None


class UnknownEnvError(UnknownPluginError):
    """No environment of that name; the message lists the known ones, with a did-you-mean."""


def _check_spec(name: str, target: object) -> None:
    if not isinstance(target, EnvSpec):
        raise TypeError(
            f"environment {name!r}: register it with rllm.envs.register_env (an entry point in rllm.envs "
            f"names a module that does so, or a register* function), not {type(target).__name__}"
        )


ENVS: Registry[EnvSpec] = Registry("environment", group="rllm.envs", check=_check_spec)
"""Every registered environment, by name (entries are :class:`EnvSpec`; ``register_env`` adds one)."""


def register_env(
    name: str,
    *,
    env: type[Env] | Callable[[dict[str, Any], Any], Env],
    agent: Callable[[Any], Agent],
    tasks: TaskFamily,
    options: type[EnvOptions] = EnvOptions,
    description: str = "",
    default_size: dict[str, int] | None = None,
    eval_options: Mapping[str, Any] | None = None,
    replace: bool = False,
) -> EnvSpec:
    """Register an environment under ``name`` (see the module docstring); returns its entry.

    ``env`` may be an ``Env`` subclass (built with ``Env.from_task(task)``). ``eval_options`` overrides
    option defaults when ``rllm eval`` plays it. Registering a taken name is refused unless ``replace``.
    """
    if not (isinstance(options, type) and issubclass(options, EnvOptions)):
        raise TypeError(f"environment {name!r}: options must subclass rllm.envs.EnvOptions")
    make_env = env
    if isinstance(env, type) and issubclass(env, Env):
        env_cls = env

        def make_env(task: dict[str, Any], _options: Any) -> Env:
            return env_cls.from_task(task)

    spec = EnvSpec(
        name=name,
        env=make_env,  # type: ignore[arg-type]
        agent=agent,
        tasks=tasks,
        options=options,
        description=description,
        default_size=dict(default_size or {"train": 500, "test": 100}),
        eval_options=MappingProxyType(dict(eval_options or {})),
    )
    spec.make_options(**spec.eval_options)  # refuse bad eval options now, not at the first `rllm eval`
    ENVS.register(name, spec, options=options, description=description, replace=replace)
    return spec


def unregister_env(name: str) -> None:
    """Forget environment ``name`` (a test's toy environment, say); unknown names are ignored."""
    ENVS.unregister(name)


def envs() -> Mapping[str, EnvSpec]:
    """Every registered environment, by name (a read-only snapshot)."""
    return MappingProxyType({plugin.name: plugin.target for plugin in ENVS.plugins()})


def env_names() -> list[str]:
    return sorted(ENVS)


def is_env(name: str | None) -> bool:
    return name is not None and name in ENVS


def get_env(name: str) -> EnvSpec:
    """The entry of environment ``name``; ``UnknownEnvError`` with did-you-mean otherwise."""
    try:
        return ENVS.get(name)
    except UnknownPluginError as exc:
        raise UnknownEnvError(*exc.args) from None
