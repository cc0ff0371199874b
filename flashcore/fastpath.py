"""The repeat-call fast path of flashcore.attention and the serving entries: a call whose every input but the data
pointers matches an earlier call that passed all host checks and launched the kernel skips the checks, the
tuned-table lookup and the plan, and launches with that call's parameters (fresh pointers, a fresh output).

`signature` is what the verdict of the checks (flashcore/check.py) and the launch depend on, pointers aside: each
tensor's type, shape, strides, dtype, device and layout, whether grad is needed (grad mode and requires_grad), every
argument with its type (1 is not True), and the tuned-table switches of the environment. The one pointer-dependent
check that remains, the 16-byte base alignment TMA needs, runs on every call (`aligned`). Calls with out=, lse=,
tile= or debug_fault= always take the checked path (out and lse must be checked against the inputs' memory each
time).
The serving entries' keys (`serving_signature`) start with the entry's name, so they never meet
flashcore.attention's; the index tensors' values are device data and never part of a key. The launch of a hit is
flashcore/launch.py `again`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flashcore import _lib
from flashcore.validate import ALIGN_BYTES

if TYPE_CHECKING:
    import torch

MAX_ENTRIES = 1024  # signatures kept; the cache is cleared when full (a server sees few distinct shapes)
_POINTERS = ("q", "k", "v", "o", "lse", "workspace")


@dataclass(frozen=True)
class Entry:
    template: _lib.FcParams  # every fc_params field of the checked call, the pointers zeroed
    workspace_bytes: int
    lse_shape: tuple[int, int, int]


_CACHE: dict[tuple[Any, ...], Entry] = {}


def signature(q: Any, k: Any, v: Any, causal: Any, softmax_scale: Any, deterministic: Any, fallback: Any,
              num_splits: Any, sm_margin: Any) -> tuple[Any, ...] | None:
    """The call's key (see the module docstring); None when an input is not a tensor or an argument unhashable."""
    import torch

    try:
        grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
        key = (type(q), q.shape, q.stride(), q.dtype, q.device, q.layout,
               type(k), k.shape, k.stride(), k.dtype, k.device, k.layout,
               type(v), v.shape, v.stride(), v.dtype, v.device, v.layout, grad,
               type(causal), causal, type(softmax_scale), softmax_scale, type(deterministic), deterministic,
               type(fallback), fallback, type(num_splits), num_splits, type(sm_margin), sm_margin,
               os.environ.get("FLASHCORE_TUNE"), os.environ.get("FLASHCORE_TUNE_TABLE"))
        hash(key)
    except (AttributeError, TypeError):
        return None
    return key


def serving_signature(kind: str, tensors: tuple[Any, ...], args: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """A serving entry's key: its name, grad mode, each tensor's type, shape, strides, dtype, device, layout and
    grad need (None stays None), each argument with its type, the tuned-table switches; None: uncacheable."""
    import torch

    try:
        key: list[Any] = [kind, torch.is_grad_enabled()]
        for t in tensors:
            if t is None:
                key.append(None)
            else:
                key += [type(t), t.shape, t.stride(), t.dtype, t.device, t.layout, t.requires_grad]
        for a in args:
            parts = a if isinstance(a, (list, tuple)) else (a,)
            if any(isinstance(x, torch.Tensor) for x in parts):  # a tensor-valued argument (a window as tensors)
                return None  # hashes by identity: an in-place change would go unseen, so take the checked path
            key += [type(a), tuple(a) if isinstance(a, list) else a]
        key += [os.environ.get("FLASHCORE_TUNE"), os.environ.get("FLASHCORE_TUNE_TABLE")]
        out = tuple(key)
        hash(out)
    except (AttributeError, TypeError):
        return None
    return out


def lookup(key: tuple[Any, ...] | None) -> Entry | None:
    return _CACHE.get(key) if key is not None else None


def remember(key: tuple[Any, ...] | None, params: _lib.FcParams, workspace_bytes: int) -> None:
    """Keep a checked call's launch parameters under its signature."""
    if key is None:
        return
    template = _lib.FcParams.from_buffer_copy(params)
    for name in _POINTERS:
        setattr(template, name, None)
    template.workspace_bytes = 0
    if len(_CACHE) >= MAX_ENTRIES:
        _CACHE.clear()
    _CACHE[key] = Entry(template, workspace_bytes, (params.batch, params.heads_q, params.seqlen_q))


def aligned(*tensors: torch.Tensor) -> bool:
    """Every base address 16-byte aligned (else the checked path raises the error that says so)."""
    ptr = 0
    for t in tensors:
        ptr |= t.data_ptr()
    return ptr % ALIGN_BYTES == 0


def params_for(entry: Entry, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
               lse: torch.Tensor) -> _lib.FcParams:
    params = _lib.FcParams.from_buffer_copy(entry.template)
    params.q, params.k, params.v = q.data_ptr(), k.data_ptr(), v.data_ptr()
    params.o, params.lse = out.data_ptr(), lse.data_ptr()
    return params


def clear() -> None:
    _CACHE.clear()


def size() -> int:
    return len(_CACHE)
