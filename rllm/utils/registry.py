"""One registry type for every kind of plug-in: environments, rewards, tools, workflows, datasets, advantage
estimators, losses, training backends, inference engines, loggers.

A plug-in is a name, the object it stands for (or ``"module:attribute"``, imported on first use, so that
listing the names of a kind imports nothing heavy), an optional options model (a pydantic model: the config
keys the plug-in owns) and optional capabilities (what the plug-in can do, which start-up checks ask instead
of branching on names)::

    from rllm.trainer.backends import BACKENDS

    BACKENDS.register("mine", MyBackend, options=MyOptions, description="my cluster's trainer")

An installed package adds plug-ins without being imported by anyone: in its ``pyproject.toml``, an entry
point in the kind's group (``rllm.backends``, ``rllm.envs``, ...) names a module that registers on import,
a function whose name starts with ``register`` (called once), or the plug-in itself (registered under the
entry point's name). Entry points load the first time a name of that kind is looked up.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from types import ModuleType
from typing import Any, Generic, TypeVar, overload

from rllm.utils.config import unknown_name

__all__ = ["Plugin", "Registry", "UnknownPluginError", "load_target"]

T = TypeVar("T")


class UnknownPluginError(KeyError, ValueError):
    """No plug-in of that name; the message lists the known ones, with a did-you-mean. A ``KeyError`` (a
    lookup that failed) and a ``ValueError`` (a bad name in a config)."""

    def __str__(self) -> str:  # KeyError would show the message quoted
        return str(self.args[0]) if self.args else ""


def load_target(spec: Any) -> Any:
    """``spec`` itself, or the attribute that ``"package.module:attribute"`` names (imported now)."""
    if not isinstance(spec, str):
        return spec
    module, sep, attr = spec.partition(":")
    if not (sep and module and attr):
        raise ValueError(f"{spec!r} is not 'package.module:attribute'")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


@dataclass
class Plugin(Generic[T]):
    """One registered plug-in. ``target``, ``options`` and ``capabilities`` may each be given as
    ``"module:attribute"``; the properties import them on first use."""

    name: str
    kind: str
    target_spec: Any
    options_spec: Any = None
    capabilities_spec: Any = None
    description: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def target(self) -> T:
        """The plug-in, looked up anew each time from ``"module:attribute"`` (cheap once imported): a module
        that builds it on attribute access (``rllm.rewards.code.code_reward`` checks its sandbox then) is
        asked every time, as a plain import would."""
        return load_target(self.target_spec)  # type: ignore[no-any-return]

    @property
    def options(self) -> Any:
        """The options model (a pydantic model class), or None when the plug-in has no options."""
        self.options_spec = load_target(self.options_spec)
        return self.options_spec

    @property
    def capabilities(self) -> Any:
        """What the plug-in declared it can do: given at registration, else the target's ``capabilities``
        attribute (a backend class declares its own), else None."""
        if self.capabilities_spec is None:
            return getattr(self.target, "capabilities", None)
        self.capabilities_spec = load_target(self.capabilities_spec)
        return self.capabilities_spec


class Registry(Generic[T]):
    """The plug-ins of one kind, by name (see the module docstring).

    ``kind`` names one plug-in in messages ("backend", "advantage estimator"); ``group`` is the entry-point
    group installed packages register through (default ``rllm.<kind>s`` with spaces as underscores);
    ``key`` is the config key that names one (``backend.name``), quoted in errors; ``check`` validates a
    target when it is registered (raise ``TypeError`` with what is wrong)."""

    def __init__(
        self,
        kind: str,
        *,
        group: str | None = None,
        key: str | None = None,
        check: Callable[[str, Any], None] | None = None,
    ) -> None:
        self.kind = kind
        self.group = group or "rllm." + kind.replace(" ", "_") + "s"
        self.key = key
        self._check = check
        self._plugins: dict[str, Plugin[T]] = {}
        self._entry_points_loaded = False
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ registering

    @overload
    def register(
        self,
        name: str,
        target: None = None,
        *,
        options: Any = None,
        capabilities: Any = None,
        description: str = "",
        replace: bool = False,
        **extra: Any,
    ) -> Callable[[Any], Any]: ...

    @overload
    def register(
        self,
        name: str,
        target: Any,
        *,
        options: Any = None,
        capabilities: Any = None,
        description: str = "",
        replace: bool = False,
        **extra: Any,
    ) -> Plugin[T]: ...

    def register(
        self,
        name: str,
        target: Any = None,
        *,
        options: Any = None,
        capabilities: Any = None,
        description: str = "",
        replace: bool = False,
        **extra: Any,
    ) -> Any:
        """Register ``target`` as ``name``; without ``target``, a decorator that registers what it wraps.
        A taken name is refused unless ``replace``. ``extra`` keeps kind-specific fields (``Plugin.extra``).
        """
        if target is None:

            def decorate(obj: Any) -> Any:
                self.register(
                    name,
                    obj,
                    options=options,
                    capabilities=capabilities,
                    description=description,
                    replace=replace,
                    **extra,
                )
                return obj

            return decorate
        if not isinstance(name, str) or not name or not name.replace("_", "").replace("-", "").isalnum():
            raise ValueError(f"{self.kind} name {name!r}: use letters, digits, '_' and '-'")
        if self._check is not None and not isinstance(target, str):
            self._check(name, target)
        with self._lock:
            if name in self._plugins and not replace:
                raise ValueError(
                    f"{self.kind} {name!r} is already registered: pass replace=True to replace it"
                )
            plugin: Plugin[T] = Plugin(
                name=name,
                kind=self.kind,
                target_spec=target,
                options_spec=options,
                capabilities_spec=capabilities,
                description=description or _first_line(target),
                extra=dict(extra),
            )
            self._plugins[name] = plugin
        return plugin

    def unregister(self, name: str) -> None:
        """Forget ``name`` (a test's plug-in, say); unknown names are ignored."""
        with self._lock:
            self._plugins.pop(name, None)

    # ------------------------------------------------------------------ looking up

    def plugin(self, name: str) -> Plugin[T]:
        """The entry of ``name``; :class:`UnknownPluginError` with a did-you-mean otherwise."""
        self._load_entry_points()
        try:
            return self._plugins[name]
        except (KeyError, TypeError):
            where = f" ({self.key}={name!r})" if self.key else ""
            raise UnknownPluginError(unknown_name(self.kind, name, self._plugins) + where) from None

    def get(self, name: str) -> T:
        """The object registered as ``name`` (imported now if it was given as ``"module:attribute"``)."""
        return self.plugin(name).target

    def names(self) -> list[str]:
        """Every registered name, in registration order."""
        self._load_entry_points()
        return list(self._plugins)

    def plugins(self) -> list[Plugin[T]]:
        self._load_entry_points()
        return list(self._plugins.values())

    def __contains__(self, name: object) -> bool:
        self._load_entry_points()
        return name in self._plugins

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(self._plugins)})"

    def _load_entry_points(self) -> None:
        """Import what installed packages name in this kind's entry-point group, once."""
        if self._entry_points_loaded:
            return
        self._entry_points_loaded = True  # first: a module loaded below may look names up
        for point in entry_points(group=self.group):
            loaded = point.load()
            if isinstance(loaded, ModuleType):
                continue  # it registered on import
            if callable(loaded) and getattr(loaded, "__name__", "").startswith("register"):
                loaded()  # a function that registers
            elif point.name not in self._plugins:
                self.register(point.name, loaded)


def _first_line(target: Any) -> str:
    """The first line of the target's own docstring (a function's or a class's; an instance's class
    docstring describes the type, not this plug-in, so it gives none)."""
    own = (
        isinstance(target, type) or callable(getattr(target, "__code__", None)) or hasattr(target, "__func__")
    )
    doc = target.__doc__ if own and not isinstance(target, str) else None
    return doc.strip().splitlines()[0] if doc and doc.strip() else ""
