"""Gate registry: `@register("name")` on a Gate class makes it available to `gates/phases.yaml`."""

from __future__ import annotations

from collections.abc import Callable
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
