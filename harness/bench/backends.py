"""The implementations a benchmark times: FlashCore and the baselines, on the same input tensors.

`prepare(backend, wl, q, k, v)` returns a `Prepared` call (plus the context it must run in), or raises
`Unavailable` with the reason; the runner then probes it once, so a backend that refuses the shape at run
time is "not available" too, never silently dropped.

Inputs are FlashCore's layout, q [B, Sq, Hq, D], k/v [B, Sk, Hkv, D]:
- SDPA takes [B, H, S, D]: it gets transposed views of the same tensors, inside `sdpa_kernel([that one
  backend])`, which raises when that backend cannot run the inputs (so no silent fallback to another one).
- FA3 takes [B, S, H, D] directly: `flash_attn_interface` (a source build of hopper/) or the PyPI wheel
  `fa3-fwd` (module `fa3_fwd_interface`, which reads its build flags from a module named `flash_attn_config`:
  the wheel ships it as `fa3_fwd_config`, aliased here). The wheel is built without fp16 (bf16 only).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

from flashcore.faults import Fault
from harness.schema import Workload
from harness.support import gpu, serving

if TYPE_CHECKING:
    import torch

SLOW_FAULT = int(Fault.SLOW)  # kFaultSlow: the producer waits after every K/V tile: correct but slow


class Unavailable(Exception):
    """This backend cannot run this workload here; the message says why."""


@dataclass
class Prepared:
    fn: Callable[[], object]
    context: Callable[[], AbstractContextManager[Any]] = field(default=contextlib.nullcontext)
    planted: str = ""
    implementation: str = ""  # e.g. the FA3 module that was imported


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}".rstrip(": ")


# ---- FlashCore ----------------------------------------------------------------------------------------


def _flashcore(wl: Workload, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, fault: int,
               deterministic: bool = False, default_tiles: bool = False) -> Prepared:
    try:
        fc = gpu.load_flashcore(fault)
    except gpu.FlashcoreUnavailable as e:
        raise Unavailable(str(e)) from None
    out, lse = gpu.poisoned_outputs(wl, str(q.device))
    kwargs: dict[str, Any] = {"tile": fc.TileConfig()} if default_tiles else {}
    fn = functools.partial(fc.attention, q, k, v, causal=wl.causal, out=out, lse=lse, deterministic=deterministic,
                           **kwargs)
    what = "flashcore" + (", deterministic=True" if deterministic else "") + (", default tiles" if default_tiles
                                                                             else "")
    return Prepared(fn, planted=f"kernel debug_fault {fault}" if fault else "", implementation=what)


# ---- torch SDPA ---------------------------------------------------------------------------------------

_SDPA = {"fa2": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION", "efficient": "EFFICIENT_ATTENTION"}


def _sdpa(backend: str, wl: Workload, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Prepared:
    import torch.nn.functional as F

    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError as e:
        raise Unavailable(f"torch.nn.attention.sdpa_kernel missing in this torch: {e}") from None
    which = getattr(SDPBackend, _SDPA[backend], None)
    if which is None:
        raise Unavailable(f"this torch has no SDPBackend.{_SDPA[backend]}")
    if wl.causal and wl.seqlen_q != wl.seqlen_k:
        raise Unavailable("SDPA's is_causal aligns the mask top-left, FlashCore's bottom-right: Sq != Sk differs")
    kwargs: dict[str, Any] = {"is_causal": wl.causal}
    if wl.heads_q != wl.heads_kv:
        kwargs["enable_gqa"] = True
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, H, S, D] views, no copy
    fn = functools.partial(F.scaled_dot_product_attention, qt, kt, vt, **kwargs)
    return Prepared(fn, context=functools.partial(sdpa_kernel, [which]), implementation=f"SDPBackend.{which.name}")


# ---- FA3 ----------------------------------------------------------------------------------------------


FA3_INSTALL_HINT = ("install it on the H100 host: pip install fa3-fwd (FlashAttention-3's forward kernels, bf16 and "
                    "FP8), or build flash-attention's hopper/ (python setup.py install), which adds fp16")


def import_fa3() -> tuple[Callable[..., Any], str, frozenset[str]]:
    """(flash_attn_func, module description, dtypes it was built for); raises Unavailable."""
    mod, where, dtypes = import_fa3_module()
    return mod.flash_attn_func, where, dtypes


@functools.cache
def import_fa3_module() -> tuple[ModuleType, str, frozenset[str]]:
    """(FA3's interface module, its description, dtypes it was built for); raises Unavailable."""
    errors = []
    try:
        mod: ModuleType = importlib.import_module("flash_attn_interface")
        return mod, "flash_attn_interface", frozenset({"bf16", "fp16", "e4m3"})
    except Exception as e:  # noqa: BLE001 - any import failure means "try the next one"
        errors.append(f"flash_attn_interface: {_first_line(e)}")
    try:
        config = importlib.import_module("fa3_fwd_config")
        sys.modules.setdefault("flash_attn_config", config)  # the interface imports its config under this name
        mod = importlib.import_module("fa3_fwd_interface")
        flags = getattr(config, "CONFIG", {}).get("build_flags", {})
        dtypes = {"bf16"} | (set() if flags.get("FLASHATTENTION_DISABLE_FP16") else {"fp16"}) | (
            set() if flags.get("FLASHATTENTION_DISABLE_FP8") else {"e4m3"})
        version = _dist_version("fa3-fwd")
        return mod, f"fa3_fwd_interface (fa3-fwd {version})", frozenset(dtypes)
    except Exception as e:  # noqa: BLE001
        errors.append(f"fa3_fwd_interface: {_first_line(e)}")
    raise Unavailable("FA3 not importable: " + "; ".join(errors) + f" ({FA3_INSTALL_HINT})")


def _dist_version(name: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "?"


def _fa3(wl: Workload, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Prepared:
    func, where, dtypes = import_fa3()
    if wl.dtype not in dtypes:
        raise Unavailable(f"{where} is built without {wl.dtype} (only {', '.join(sorted(dtypes))})")
    # flash_attn_func defaults to num_splits=1 (no split-KV); 0 asks for FA3's own split heuristic, as FlashCore
    # chooses its split count: without it a batch-1 decode ran on 8 CTAs and FA3 read K/V at 0.39 TB/s.
    kwargs: dict[str, Any] = {"causal": wl.causal}
    if "num_splits" in inspect.signature(func).parameters:
        kwargs["num_splits"] = 0
        where += ", num_splits=0 (its heuristic)"
    return Prepared(functools.partial(func, q, k, v, **kwargs), implementation=where)


def prepare(backend: str, wl: Workload, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
            fault: int = 0) -> Prepared:
    """A ready call of `backend` on these inputs; Unavailable when it cannot run them here."""
    if backend == "flashcore":
        return _flashcore(wl, q, k, v, fault)
    if backend == "flashcore-det":  # deterministic mode, timed beside the default: the ratio is its cost
        return _flashcore(wl, q, k, v, fault, deterministic=True)
    if backend == "flashcore-default":  # the hand-tuned defaults, timed beside the tuned table: the ratio is its gain
        return _flashcore(wl, q, k, v, 0, default_tiles=True)
    if backend in _SDPA:
        return _sdpa(backend, wl, q, k, v)
    if backend == "fa3":
        return _fa3(wl, q, k, v)
    raise Unavailable(f"unknown backend {backend!r}")


def prepare_serving(backend: str, batch: serving.Batch, fault: int = 0) -> Prepared:
    """prepare() for a workload that is not plain dense (harness/support/serving.py): FlashCore's serving entry
    points and FA3's varlen / KV-cache ones; FP8 (harness/support/fp8.py): flashcore.attention_fp8 and FA3's
    flash_attn_func with the same descales. SDPA has no per-sequence lengths, windows, soft-capping or FP8."""
    wl = batch.wl
    if backend == "flashcore":
        if fault and not wl.fp8:
            raise Unavailable("planted kernel faults reach flashcore.attention and attention_fp8 only, not the serving "
                              "entry points")
        try:
            fc = gpu.load_flashcore()
        except gpu.FlashcoreUnavailable as e:
            raise Unavailable(str(e)) from None
        out, lse = gpu.poisoned_outputs(wl, str(batch.q.device))
        if wl.fp8:
            return Prepared(batch.flashcore(fc, out, lse, debug_fault=fault), implementation="flashcore.attention_fp8",
                            planted=f"kernel debug_fault {fault}" if fault else "")
        return Prepared(batch.flashcore(fc, out, lse), implementation=f"flashcore.serving ({wl.layout})")
    if backend == "fa3":
        mod, where, dtypes = import_fa3_module()
        if wl.dtype not in dtypes:
            raise Unavailable(f"{where} is built without {wl.dtype} (only {', '.join(sorted(dtypes))})")
        return Prepared(batch.fa3(mod), implementation=where)
    if wl.fp8:
        raise Unavailable(f"{backend} has no FP8 (E4M3) attention: only flashcore and fa3 run it")
    raise Unavailable(f"{backend} cannot run a {wl.layout} workload with its window/softcap: only flashcore and fa3 "
                      "have per-sequence lengths, windows and soft-capping")


def probe(p: Prepared) -> None:
    """Run the call once and wait for it; any failure (a backend refusing the shape) becomes Unavailable,
    with the warnings SDPA printed about why it refused."""
    import warnings

    import torch

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with p.context():
                p.fn()
                torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 - a refusal of any kind means "not available"
            reasons = [str(w.message).strip().splitlines()[0] for w in caught if str(w.message).strip()]
            why = _first_line(e) + (f" ({'; '.join(dict.fromkeys(reasons))})" if reasons else "")
            raise Unavailable(why) from None
