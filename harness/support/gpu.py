"""GPU helpers shared by the kernel gates, the benchmark and the tuner: availability, loading flashcore, inputs,
poisoned buffers, nvtx (the gates' verdicts on a kernel crash: harness/gates/base.py).

torch is imported inside functions so that the CPU parts of the harness (config, verdicts) load fast.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import zlib
from collections.abc import Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Any

from harness.schema import Workload

if TYPE_CHECKING:
    import torch


NO_GPU_LINE = (
    "FlashCore: no CUDA GPU on this machine (torch.cuda.is_available() is False): GPU gates not run; this run fails."
)

# NaN bit patterns written into output buffers before each call. An element still holding its pattern was
# never written; a kernel-produced NaN has a different (canonical) pattern, so the two are counted apart.
POISON_16 = {"fp16": 0x7D3C, "bf16": 0x7FA5}
POISON_LSE = 0x7FBADBAD  # float32 NaN


class FlashcoreUnavailable(RuntimeError):
    """flashcore cannot be imported or its library is missing: the kernel gates cannot run (ERROR)."""


def cuda_unavailable_reason() -> str | None:
    """None when a CUDA GPU is usable, else the one line to show."""
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - any import failure means no GPU work
        return f"FlashCore: torch cannot be imported ({e}): GPU gates not run; this run fails."
    if not torch.cuda.is_available():
        return NO_GPU_LINE
    return not_hopper_reason(torch.cuda.get_device_capability(0), torch.cuda.get_device_name(0))


def visible_gpu_count() -> int:
    """CUDA devices this process can see (honours CUDA_VISIBLE_DEVICES); 0 without torch or a driver."""
    try:
        import torch

        return int(torch.cuda.device_count())
    except Exception:  # noqa: BLE001 - no torch, no driver: none
        return 0


def not_hopper_reason(capability: tuple[int, int], name: str) -> str | None:
    """On a GPU that is not SM 9.0 the kernel cannot run (flashcore raises; fallback='sdpa' would test torch, not
    FlashCore): the GPU gates are not run, and the report says so."""
    if tuple(capability) == (9, 0):
        return None
    major, minor = capability
    return (f"FlashCore: GPU 0 is {name} (SM {major}.{minor}), not SM 9.0: the kernel was not tested; GPU gates not "
            "run; this run fails.")


def load_flashcore(fault: int = 0) -> ModuleType:
    """The flashcore module; with `fault` != 0 a copy whose attention() and attention_fp8() plant that test-only
    kernel fault."""
    try:
        fc = importlib.import_module("flashcore")
    except Exception as e:  # noqa: BLE001 - report any load failure as the gate's error
        raise FlashcoreUnavailable(f"cannot import flashcore: {type(e).__name__}: {e}") from e
    library_path = getattr(fc, "library_path", None)
    if callable(library_path):
        lib = library_path()
        if not lib.is_file():
            raise FlashcoreUnavailable(f"flashcore library {lib} not found: run `make build` first")
    if not fault:
        return fc
    planted = ModuleType("flashcore_planted")
    planted.__dict__.update(fc.__dict__)
    planted.attention = functools.partial(fc.attention, debug_fault=fault)  # type: ignore[attr-defined]
    if hasattr(fc, "attention_fp8"):
        planted.attention_fp8 = functools.partial(fc.attention_fp8, debug_fault=fault)  # type: ignore[attr-defined]
    return planted


def workload_seed(base: int, gate: str, workload: str, index: int = 0) -> int:
    """A distinct, reproducible seed per (run, gate, workload, repeat): recorded in the results."""
    return zlib.crc32(f"{base}:{gate}:{workload}:{index}".encode()) & 0x7FFFFFFF


def torch_dtype(name: str) -> torch.dtype:
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16, "e4m3": torch.float8_e4m3fn}[name]


def make_inputs(wl: Workload, seed: int, device: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fresh random q [B,Sq,Hq,D], k and v [B,Sk,Hkv,D] (standard normal, never zeros)."""
    import torch

    g = torch.Generator(device=device).manual_seed(seed)
    dt = torch_dtype(wl.dtype)
    q = torch.randn(wl.batch, wl.seqlen_q, wl.heads_q, wl.head_dim, generator=g, device=device, dtype=dt)
    k = torch.randn(wl.batch, wl.seqlen_k, wl.heads_kv, wl.head_dim, generator=g, device=device, dtype=dt)
    v = torch.randn(wl.batch, wl.seqlen_k, wl.heads_kv, wl.dim_v, generator=g, device=device, dtype=dt)
    return q, k, v


def output_shapes(wl: Workload) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(out, lse) shapes of a call on `wl`: [B, Sq, Hq, Dv], [B, Hq, Sq]; varlen [total_q, Hq, Dv], [Hq, total_q]."""
    if wl.layout == "varlen":
        total = sum(wl.seqlens_q)
        return (total, wl.heads_q, wl.dim_v), (wl.heads_q, total)
    return (wl.batch, wl.seqlen_q, wl.heads_q, wl.dim_v), (wl.batch, wl.heads_q, wl.seqlen_q)


def poisoned_outputs(wl: Workload, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Output and LSE float32 (output_shapes), every element holding its poison NaN pattern."""
    import torch

    out_shape, lse_shape = output_shapes(wl)
    dt = wl.out_dtype
    out = torch.full(out_shape, POISON_16[dt], dtype=torch.int16, device=device).view(torch_dtype(dt))
    lse = torch.full(lse_shape, POISON_LSE, dtype=torch.int32, device=device).view(torch.float32)
    return out, lse


def bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bit patterns of a 16- or 32-bit float tensor (so NaN payloads compare equal or not)."""
    import torch

    return t.view(torch.int16 if t.element_size() == 2 else torch.int32)


def count_unwritten(out: torch.Tensor, lse: torch.Tensor, dtype: str) -> tuple[int, int]:
    """How many output / LSE elements still hold the poison pattern."""
    return int((bits(out) == POISON_16[dtype]).sum()), int((bits(lse) == POISON_LSE).sum())


def call_kernel(fc: ModuleType, wl: Workload, q: Any, k: Any, v: Any, out: Any, lse: Any, **options: Any) -> None:
    """Run flashcore into the given (poisoned) buffers and wait for it, so async faults surface here.
    `options`: further keyword arguments of flashcore.attention (e.g. sm_margin)."""
    import torch

    fc.attention(q, k, v, causal=wl.causal, out=out, lse=lse, **options)
    if q.is_cuda:
        torch.cuda.synchronize()


@contextlib.contextmanager
def nvtx_range(name: str) -> Iterator[None]:
    """An NVTX range (visible in nsys / ncu) around one workload's GPU work; no-op when NVTX is unavailable."""
    try:
        import nvtx

        ctx: contextlib.AbstractContextManager[Any] = nvtx.annotate(name, domain="flashcore")
    except ImportError:
        ctx = _torch_nvtx(name)
    with ctx:
        yield


@contextlib.contextmanager
def _torch_nvtx(name: str) -> Iterator[None]:
    import torch

    try:
        torch.cuda.nvtx.range_push(name)
        pushed = True
    except Exception:  # noqa: BLE001 - a CPU-only torch has no NVTX
        pushed = False
    try:
        yield
    finally:
        if pushed:
            torch.cuda.nvtx.range_pop()


def free_memory() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()
