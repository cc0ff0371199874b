"""Gate registry: `@register("name")` on a Gate class makes it available to `gates/phases.yaml`."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable
from typing import TypeVar

from harness.gates.base import Gate

G = TypeVar("G", bound=type[Gate])

_REGISTRY: dict[str, type[Gate]] = {}


def register(name: str) -> Callable[[G], G]:
    """Class decorator: register a Gate subclass under `name` (the key used in phases.yaml)."""

    def deco(cls: G) -> G:
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(f"gate {name!r} registered twice ({_REGISTRY[name].__qualname__}, {cls.__qualname__})")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return deco


def get(name: str) -> type[Gate] | None:
    return _REGISTRY.get(name)


def names() -> tuple[str, ...]:
    return tuple(sorted(_REGISTRY))


def import_modules(package: str, path: Iterable[str]) -> tuple[str, ...]:
    """Import every module of `package` (found on `path`, in name order), which runs their `@register`s; their
    names. A module that fails to import raises: a gate that cannot load must not vanish from the run."""
    found = tuple(m.name for m in pkgutil.iter_modules(list(path)) if not m.name.startswith("_"))
    for name in found:
        importlib.import_module(f"{package}.{name}")
    return found


def module_of(name: str) -> str:
    """The module that registered gate `name` (KeyError when none did)."""
    return _REGISTRY[name].__module__
