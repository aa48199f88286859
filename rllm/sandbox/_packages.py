"""The packages a run may import besides the standard library, each named by the caller.

A name is looked up in this (the host) interpreter with ``importlib.util.find_spec``, which finds a top-level
package without importing it. It must be a regular install in a site-packages directory: what the sandbox
gets is that package's own directory (or module file) and, from its distribution's ``RECORD``, the wheel's
companion directories next to it (``numpy.libs``: the shared libraries its extensions link to, found
relative to them; ``numpy-2.4.6.dist-info``: what ``importlib.metadata`` reads). Under bubblewrap these are
bound read-only into ``SITE_DIR``, a directory that exists only in the sandbox; the rest of site-packages
stays masked. Dependencies are not followed: a package that imports another needs both named.

Refused, with one line each (``PackageNotAllowed``): a name that is not a top-level package name, ``rllm``
itself, one that is not installed, one of the standard library (every run has it), and one that does not
lie in a site-packages directory (an editable install or a ``sys.path`` entry pointing into the project:
binding it would expose the project) or that holds a directory that must stay secret.
"""

from __future__ import annotations

import functools
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import site
import sys
import sysconfig
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from rllm.sandbox._bwrap import _is_under, _parents, secret_dirs

# Where the allowed packages appear inside the bubblewrap sandbox (nothing of the host is at /opt there).
SITE_DIR = "/opt/rllm-sandbox-site"
# Companion directories a wheel installs next to its package, bound along with it.
_COMPANION_SUFFIXES = (".libs", ".dist-info")
# The package that must never enter: it holds the project (the built-in code problems and their answers).
_FORBIDDEN = "rllm"


class PackageNotAllowed(ValueError):
    """A package named in ``packages`` cannot be let into the sandbox; the message says why and what to do."""


@dataclass(frozen=True)
class Package:
    """One allowed top-level package as found in the host interpreter: ``paths`` are the host files and
    directories the sandbox gets (the package's directory or module file, then its companions), all lying
    directly in the site-packages directory ``site_dir``."""

    name: str
    site_dir: str
    paths: tuple[str, ...]


_RESOLVED: dict[tuple[str, ...], tuple[Package, ...]] = {}
_RESOLVED_LOCK = threading.Lock()


def normalize(packages: Sequence[str]) -> tuple[str, ...]:
    """``packages`` as a sorted tuple of distinct names; TypeError for a bare string (a common slip)."""
    if isinstance(packages, str):
        raise TypeError(
            f"packages must be a sequence of names, e.g. ({packages!r},), not the string {packages!r}"
        )
    for name in packages:
        if not isinstance(name, str):
            raise TypeError(f"packages must be names (str), got {name!r} ({type(name).__name__})")
    return tuple(sorted(set(packages)))


def cached_packages(names: tuple[str, ...]) -> tuple[Package, ...] | None:
    """The packages ``names`` (normalized) stand for if they were already found (never blocks)."""
    return () if not names else _RESOLVED.get(names)


def resolve_packages(names: tuple[str, ...]) -> tuple[Package, ...]:
    """The packages ``names`` (normalized) stand for, found once per tuple of names (blocks while it reads
    the distributions' records); ``PackageNotAllowed`` for the first that cannot be let in."""
    with _RESOLVED_LOCK:
        if names not in _RESOLVED:
            found = tuple(_find(name) for name in names)
            _check_no_collision(found)
            _RESOLVED[names] = found
        return _RESOLVED[names]


def bind_args(packages: tuple[Package, ...]) -> list[str]:
    """bwrap arguments binding each package's paths read-only into ``SITE_DIR``."""
    args: list[str] = []
    paths = dict.fromkeys(path for package in packages for path in package.paths)  # a shared .dist-info once
    for path in paths:
        target = os.path.join(SITE_DIR, os.path.basename(path))
        args += [*_parents(target), "--ro-bind", path, target]
    return args


def search_path(packages: tuple[Package, ...], bound: bool) -> list[str]:
    """The directories the program's ``sys.path`` gets: ``SITE_DIR`` when the packages are bound there
    (bubblewrap), else the host's site-packages directories that hold them, as they are."""
    if not packages:
        return []
    if bound:
        return [SITE_DIR]
    return sorted({package.site_dir for package in packages})


def describe(packages: tuple[Package, ...], bound: bool) -> str:
    """The ``packages`` line of ``protections()``."""
    if not packages:
        return "none: the standard library only"
    listed = "; ".join(
        f"{package.name} ({', '.join(os.path.basename(p) for p in package.paths)})" for package in packages
    )
    if bound:
        return (
            f"read-only at {SITE_DIR}, nothing else of site-packages: {listed}; dependencies are not "
            f"followed (each package is named)"
        )
    return (
        f"from the host's site-packages as they are ({', '.join(search_path(packages, False))} on sys.path): "
        f"{listed}; every other package in those directories is importable too (the filesystem is the host's)"
    )


@functools.cache
def _find(name: str) -> Package:
    if not name.isidentifier():
        top = name.split(".")[0]
        hint = f"; name the top-level package {top!r}" if top.isidentifier() else ""
        raise PackageNotAllowed(f"packages: {name!r} is not a top-level package name{hint}")
    if name == _FORBIDDEN:
        raise PackageNotAllowed(
            "packages: 'rllm' cannot be allowed into the sandbox: it is the project (its code problems hold "
            "the answers); drop it from packages"
        )
    spec = importlib.util.find_spec(name)  # a top-level name: finds it without importing anything
    if spec is None:
        raise PackageNotAllowed(
            f"packages: {name!r} is not installed in {sys.executable}: pip install it there, or drop it"
        )
    if spec.origin in ("built-in", "frozen") or _in_stdlib(spec):
        raise PackageNotAllowed(
            f"packages: {name!r} is part of the standard library, which every run has; drop it from packages"
        )
    locations = list(spec.submodule_search_locations or [])
    if len(locations) > 1:
        raise PackageNotAllowed(
            f"packages: {name!r} is a namespace package spread over {len(locations)} directories "
            f"({', '.join(locations)}): name a regular package"
        )
    entry = locations[0] if locations else spec.origin
    if not entry:
        raise PackageNotAllowed(f"packages: {name!r} has no location on disk (loader {spec.loader!r})")
    real = os.path.realpath(entry)
    site_dir = os.path.dirname(real)
    if site_dir not in _site_dirs():
        raise PackageNotAllowed(
            f"packages: {name!r} is at {real}, not installed in a site-packages directory (an editable "
            f"install or a sys.path entry into a project): letting it in would expose that directory; "
            f"pip install it (non-editable), or drop it"
        )
    paths = [real, *_companions(os.path.basename(real), site_dir)]
    for path in paths:
        inside = [s for s in secret_dirs() if _is_under(s, path)]
        if inside:
            raise PackageNotAllowed(
                f"packages: {name!r} cannot be let in: {path} holds {inside[0]}, which must stay secret"
            )
    return Package(name, site_dir, tuple(paths))


def _companions(entry: str, site_dir: str) -> list[str]:
    """The ``.libs`` and ``.dist-info`` directories that the distributions installing ``entry`` (a package
    directory or module file in ``site_dir``) put next to it, from their ``RECORD``."""
    found: set[str] = set()
    for dist in importlib.metadata.distributions(path=[site_dir]):
        tops = {file.parts[0] for file in dist.files or () if file.parts and file.parts[0] != ".."}
        if entry in tops:
            found.update(top for top in tops if top.endswith(_COMPANION_SUFFIXES))
    if not found:  # installed without a RECORD: the auditwheel convention, if it is there
        found.add(f"{entry.split('.')[0]}.libs")
    paths = (os.path.join(site_dir, top) for top in sorted(found))
    return [
        os.path.realpath(p)
        for p in paths
        if os.path.isdir(p) and os.path.dirname(os.path.realpath(p)) == site_dir
    ]


def _site_dirs() -> set[str]:
    """The host interpreter's site-packages directories (and any ``sys.path`` entry named like one)."""
    dirs = {*site.getsitepackages(), site.getusersitepackages()}
    dirs.update(p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages"))
    return {os.path.realpath(d) for d in dirs}


def _in_stdlib(spec: importlib.machinery.ModuleSpec) -> bool:
    if spec.origin is None:
        return False
    stdlib = {os.path.realpath(sysconfig.get_paths()[key]) for key in ("stdlib", "platstdlib")}
    site_dirs = _site_dirs()
    real = os.path.realpath(spec.origin)
    return any(_is_under(real, s) for s in stdlib) and not any(_is_under(real, s) for s in site_dirs)


def _check_no_collision(packages: tuple[Package, ...]) -> None:
    """Two packages may share a companion (one distribution, two packages), never a name in ``SITE_DIR``."""
    seen: dict[str, str] = {}
    for package in packages:
        for path in package.paths:
            other = seen.setdefault(os.path.basename(path), path)
            if other != path:
                raise PackageNotAllowed(
                    f"packages: {package.name!r} needs {path}, but {other} has the same name in the sandbox; "
                    f"allow packages from one site-packages directory"
                )
