"""The head dims FlashCore runs: kernel/flashcore.h's FC_HEAD_DIM_TABLE, the one list (X(head_dim, head_dim_v,
fp8_supported) per entry). Read through the loaded library's fc_head_dims() when the library is loaded and exports
it, else parsed from the header: the checkout's kernel/flashcore.h, or the copy a wheel ships
(flashcore/include/flashcore.h, setup.py). Importing this module loads neither torch nor the library, so the
harness's schema can use it on a machine without a GPU.
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass
from pathlib import Path

from flashcore import _lib

HEADERS = (Path(__file__).resolve().parent / "include" / "flashcore.h",  # a wheel's copy
           Path(__file__).resolve().parent.parent / "kernel" / "flashcore.h")  # a source checkout
# The tile instantiations of the kernel (kernel/head_dims.h KernelHeadDims, which tests/test_head_dims.py compares):
# every other head dim runs on the smallest one that holds it, TMA zero-filling the missing columns (8..24 on 32,
# 40..56 on 64, 72..88 on 96, 104..120 on 128, 136..152 on 160, 168..184 on 192, 200..216 on 224, 232..248 on 256;
# v's 104..128 of FA3's pairs on the kernel of q's head dim; paged calls on 128, 192 or 256: kernel/head_dims.h
# paged_kernel_head_dim).
KERNEL_HEAD_DIMS = (32, 64, 96, 128, 160, 192, 224, 256)
_MACRO = re.compile(r"#define\s+FC_HEAD_DIM_TABLE\(X\)((?:[^\n]*\\\n)*[^\n]*)")
_ENTRY = re.compile(r"X\(\s*(\d+)\s*,\s*(\d+)\s*,\s*([01])\s*\)")
_MAX_ENTRIES = 256


@dataclass(frozen=True)
class HeadDim:
    head_dim: int  # q's and k's
    head_dim_v: int  # v's (and out's)
    fp8: bool  # flashcore.attention_fp8 runs it


def parse_header(text: str, source: str = "flashcore.h") -> tuple[HeadDim, ...]:
    """FC_HEAD_DIM_TABLE's entries in `text`; ValueError naming `source` when the macro is missing or empty."""
    m = _MACRO.search(text)
    entries = tuple(HeadDim(int(d), int(dv), fp8 == "1") for d, dv, fp8 in _ENTRY.findall(m.group(1))) if m else ()
    if not entries:
        raise ValueError(f"{source}: no FC_HEAD_DIM_TABLE(X) entries (expected lines X(head_dim, head_dim_v, fp8))")
    return entries


def from_library(lib: ctypes.CDLL) -> tuple[HeadDim, ...] | None:
    """fc_head_dims() of a loaded library; None when the library predates it."""
    fn = getattr(lib, "fc_head_dims", None)
    if fn is None:
        return None
    fn.argtypes, fn.restype = [ctypes.POINTER(ctypes.c_int32), ctypes.c_int], ctypes.c_int
    buf = (ctypes.c_int32 * (3 * _MAX_ENTRIES))()
    n = min(fn(buf, _MAX_ENTRIES), _MAX_ENTRIES)
    return tuple(HeadDim(buf[3 * i], buf[3 * i + 1], bool(buf[3 * i + 2])) for i in range(n))


def read() -> tuple[HeadDim, ...]:
    """The table: the loaded library's when it has one (it is what runs), else the header's."""
    if _lib.load.cache_info().currsize:
        entries = from_library(_lib.load())
        if entries:
            return entries
    for path in HEADERS:
        if path.is_file():
            return parse_header(path.read_text(), str(path))
    raise FileNotFoundError(f"FlashCore's head-dim table is missing: none of {', '.join(map(str, HEADERS))} exists "
                            "(reinstall the package)")


TABLE = read()
SUPPORTED = tuple(sorted({e.head_dim for e in TABLE}))  # q's head dims of flashcore.attention
FP8 = tuple(sorted({e.head_dim for e in TABLE if e.fp8}))  # ... of flashcore.attention_fp8
HEAD_DIM_V = {d: tuple(sorted({e.head_dim_v for e in TABLE if e.head_dim == d}, key=lambda dv: (dv != d, -dv)))
              for d in SUPPORTED}  # v's head dims for q's: its own first


def describe(dims: tuple[int, ...]) -> str:
    """The head dims as words: their rule when they are every multiple of the smallest up to the largest, as the
    table's 16-bit ones (FA3's rule), else the list."""
    if len(dims) > 3 and dims == tuple(range(dims[0], dims[-1] + 1, dims[0])):
        return f"head dims that are multiples of {dims[0]} up to {dims[-1]}"
    return f"head dims {', '.join(map(str, dims[:-1]))} and {dims[-1]}" if len(dims) > 1 else f"head dim {dims[0]}"


def kernel_head_dim(head_dim: int) -> int | None:
    """The compiled kernel head dim that runs `head_dim` (the smallest that holds it); None for one the table does
    not list (kernel/head_dims.h kernel_head_dim)."""
    if head_dim not in SUPPORTED:
        return None
    return min(k for k in KERNEL_HEAD_DIMS if k >= head_dim)


RULE = describe(SUPPORTED)  # "head dims that are multiples of 8 up to 256"

