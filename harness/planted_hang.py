"""Test-only planted hang (flashcore.faults.Fault.HANG): every kernel call a gate makes first runs a kernel whose
consumer never arrives on its mbarrier (tests/planted/planted_hang.cu, `make planted` -> build/libplanted_hang.so),
so the call never returns and only the watchdog (harness/gate_worker.py) can end the gate.

Planted the way harness/planted_checks.py plants its faults: flashcore.attention and attention_fp8 are replaced on
the module, in the gate worker only and only inside the `with` block; flashcore's files and the kernel are never
edited (the library's kernel id, which the tuned tables are keyed by, stays what it is).
"""

from __future__ import annotations

import ctypes
import importlib
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

LIBRARY = "libplanted_hang.so"
ENTRY_POINTS = ("attention", "attention_fp8")


class PlantedHangMissing(RuntimeError):
    pass


def library_path(repo_root: Path) -> Path:
    """build/libplanted_hang.so (BUILD_DIR, as make's, when set)."""
    return repo_root / os.environ.get("BUILD_DIR", "build") / LIBRARY


def load(repo_root: Path) -> Callable[[], int]:
    """fc_planted_hang from the built library: it never returns on a working GPU (its CUDA error code if it does)."""
    path = library_path(repo_root)
    if not path.is_file():
        raise PlantedHangMissing(f"{path} not found: run `make planted`")
    fn = ctypes.CDLL(str(path)).fc_planted_hang
    fn.restype, fn.argtypes = ctypes.c_int, []
    return fn


def hanging(repo_root: Path) -> Callable[..., object]:
    """A kernel entry point that runs the hanging kernel: it returns (raising) only if the hang could not run."""

    def call(*_: object, **__: object) -> object:
        code = load(repo_root)()
        raise RuntimeError(f"the planted hang returned (CUDA error {code}) instead of hanging")

    return call


@contextmanager
def planted_hang(repo_root: Path) -> Iterator[None]:
    """flashcore's kernel entry points hang inside the block; the real ones are back afterwards. A missing library
    is found at the first call, so it becomes that gate's ERROR (saying `make planted`), not the worker's end."""
    fc = importlib.import_module("flashcore")
    real = {name: getattr(fc, name) for name in ENTRY_POINTS if hasattr(fc, name)}
    for name in real:
        setattr(fc, name, hanging(repo_root))
    try:
        yield
    finally:
        for name, fn in real.items():
            setattr(fc, name, fn)
