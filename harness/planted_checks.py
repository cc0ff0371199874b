"""Test-only planted API faults (make selftest): one host-side check of flashcore/validate.py made a no-op,
flashcore.attention's `deterministic` flag ignored (`flag_dropped`: the determinism-strict gate must then FAIL), or
a FlashCore slower where no kernel fault reaches (`run_twice`: each call of the serving entry points, or of
attention() from a sequence length on, runs twice on the GPU: the perf-serving and scaling gates must then FAIL).
`planted("validate-off:layout")` names any of them, so the gate worker (harness/gate_worker.py) or the self-test's
timed cases (harness/selftest_perf.py) can make it where the gate runs.

flashcore.api calls its checks through the module (`validate.layout(...)`), so replacing the attribute on
flashcore.validate, in this process and only inside the `with` block, lets the inputs that check guards reach the
C library; the api gate must then FAIL. Only for checks whose return value the API ignores (layout,
self_overlap, not_aliased, rank, dtype16, same, at_most): flashcore's files are never edited.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

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


SERVING_ENTRIES = ("varlen", "dense", "kvcache")  # flashcore.serving's entry points (harness/support/batch.py)


def _twice(real: Callable[..., Any], when: Callable[..., bool]) -> Callable[..., Any]:
    @functools.wraps(real)  # its __wrapped__ says a call is planted (the CPU tests' stand-in timings read it)
    def call(*args: Any, **kwargs: Any) -> Any:
        if when(*args, **kwargs):
            real(*args, **kwargs)  # the same work once more, into the same outputs: slower, not wrong
        return real(*args, **kwargs)

    return call


@contextmanager
def run_twice(where: str) -> Iterator[None]:
    """Inside the block each call runs twice: `serving` (every call of flashcore.serving's entry points: the kernel
    faults reach attention() and attention_fp8() only), or a number N (flashcore.attention on calls with at least N
    keys, k as [batch, seqlen_k, heads, dim]: a context collapse from N on, which no kernel fault makes)."""
    names: tuple[str, ...]
    if where == "serving":
        module, names = importlib.import_module("flashcore.serving"), SERVING_ENTRIES
        when: Callable[..., bool] = lambda *_, **__: True  # noqa: E731
    elif where.isdigit() and int(where) > 0:
        module, names = importlib.import_module("flashcore"), ("attention",)
        when = lambda q, k, *_, **__: int(k.shape[1]) >= int(where)  # noqa: E731
    else:
        raise ValueError(f"run-twice:{where}: expected `serving` or a sequence length > 0")
    real = {name: getattr(module, name) for name in names}
    for name, fn in real.items():
        setattr(module, name, _twice(fn, when))
    try:
        yield
    finally:
        for name, fn in real.items():
            setattr(module, name, fn)


PLANTS = {"validate-off": check_disabled, "flag-dropped": flag_dropped, "run-twice": run_twice}


def planted(spec: str) -> AbstractContextManager[None]:
    """`kind:arg` (validate-off:layout, flag-dropped:deterministic) as its context manager; ValueError if unknown."""
    kind, _, arg = spec.partition(":")
    if kind not in PLANTS or not arg:
        raise ValueError(f"unknown plant {spec!r}: expected one of {', '.join(f'{k}:<name>' for k in PLANTS)}")
    return PLANTS[kind](arg)
