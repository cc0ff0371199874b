"""Test-only planted API faults (make selftest): one host-side check of flashcore/validate.py made a no-op, or
flashcore.attention's `deterministic` flag ignored (`flag_dropped`: the determinism-strict gate must then FAIL).
`planted("validate-off:layout")` names either, so the gate worker (harness/gate_worker.py) can make it where the
gate runs.

flashcore.api calls its checks through the module (`validate.layout(...)`), so replacing the attribute on
flashcore.validate, in this process and only inside the `with` block, lets the inputs that check guards reach the
C library; the api gate must then FAIL. Only for checks whose return value the API ignores (layout,
self_overlap, not_aliased, rank, dtype16, same, at_most): flashcore's files are never edited.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

VALIDATE = "flashcore.validate"


def _no_op(*_: object, **__: object) -> None:
    return None


@contextmanager
def check_disabled(name: str) -> Iterator[None]:
    """flashcore.validate.<name> does nothing inside the block; the real check is back afterwards, even on error."""
    validate = importlib.import_module(VALIDATE)
    real = getattr(validate, name, None)
    if not callable(real):
        raise ValueError(f"{VALIDATE}.{name} is not a check (no such function)")
    setattr(validate, name, _no_op)
    try:
        yield
    finally:
        setattr(validate, name, real)


@contextmanager
def flag_dropped(flag: str) -> Iterator[None]:
    """flashcore.attention ignores keyword `flag` inside the block (as a library that forgot to honour it)."""
    fc = importlib.import_module("flashcore")
    real = getattr(fc, "attention")  # noqa: B009 - a module attribute mypy cannot see through import_module

    def attention(*args: object, **kwargs: object) -> object:
        kwargs.pop(flag, None)
        return real(*args, **kwargs)

    setattr(fc, "attention", attention)  # noqa: B010
    try:
        yield
    finally:
        setattr(fc, "attention", real)  # noqa: B010


PLANTS = {"validate-off": check_disabled, "flag-dropped": flag_dropped}


def planted(spec: str) -> AbstractContextManager[None]:
    """`kind:arg` (validate-off:layout, flag-dropped:deterministic) as its context manager; ValueError if unknown."""
    kind, _, arg = spec.partition(":")
    if kind not in PLANTS or not arg:
        raise ValueError(f"unknown plant {spec!r}: expected one of {', '.join(f'{k}:<name>' for k in PLANTS)}")
    return PLANTS[kind](arg)
