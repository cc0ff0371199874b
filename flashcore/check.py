"""The host checks of a dense call (flashcore.attention, attention_fp8, plan, serving.dense) into a Call, and the
argument checks every layout shares (window, softcap, fallback, FP8 descales, FA3 arguments refused by name). Each
raises FlashCoreError naming the argument, its value and what is allowed; the primitives are flashcore/validate.py
(called through the module, so a test can plant a no-op there: harness/planted_checks.py).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from flashcore import faults, head_dims, split_combine, tuning, validate
from flashcore.call import Call, out_dtype, out_shape
from flashcore.errors import FlashCoreError, UnsupportedArgument

if TYPE_CHECKING:
    import torch

MAX_FAULT = int(faults.MAX_FAULT)  # debug_fault 1..4: flashcore/faults.py (kernel/common.h FaultKind)
MAX_SM_MARGIN = 1 << 20
MAX_WINDOW = 1 << 30
FALLBACKS = ("error", "sdpa")
BSHD = "[B, S, H, D]"
# fc_params.fp8_v_transpose (kernel/flashcore.h enum fc_fp8_v_transpose): where the kernel transposes V for P V.
V_TRANSPOSE = {"auto": 0, "pass": 1, "smem": 2}

# Why each FA3 argument FlashCore does not take is refused (UnsupportedArgument names it with this reason).
UNSUPPORTED = {
    "dropout_p": "dropout is not supported (FlashCore is an inference forward; FA3 has none either): pass 0.0",
    "alibi_slopes": "ALiBi biases are not supported (FA3 refuses them too)",
    "cp_world_size": "context parallelism (a KV cache sharded over GPUs) is not supported: pass 1",
    "fp8 graph capture": "FP8 inputs on packed rows or a contiguous cache have their index values checked on the "
                         "host, a device sync that a CUDA graph cannot capture; capture a paged cache (checked on "
                         "the device) or 16-bit inputs, or run the call outside the capture",
}


def fp8_unsupported(window_size: Any, softcap: Any, attention_chunk: Any, fallback: Any, s_aux: Any
                    ) -> dict[str, bool]:
    """What an FP8 call asks for that the FP8 kernels do not compile, by name, in FA3's argument order: the score
    modifiers and the fallback (run on dequantized inputs, flashcore/fp8_modifiers.py, or on a bf16 copy of a KV
    cache, flashcore/fp8_cache.py)."""
    return {"fp8 window_size": window(window_size) != (-1, -1), "fp8 softcap": softcap != 0.0,
            "fp8 attention_chunk": chunk(attention_chunk) != 0, "fp8 fallback": fallback != "error",
            "fp8 s_aux": s_aux is not None}


def fa3_splits(num_splits: Any) -> int | None:
    """FA3's num_splits (0: its heuristic, 1: no split, n: n splits) as flashcore.attention's (None: automatic)."""
    if isinstance(num_splits, bool) or not isinstance(num_splits, int) or num_splits < 0:
        raise FlashCoreError(f"num_splits is {num_splits!r}: expected 0 (chosen automatically), 1 (no split-KV) or "
                             "a split count")
    return None if num_splits == 0 else num_splits


def no_descales(q: object, descales: Mapping[str, object]) -> None:
    """Descales given with inputs that are not FP8 raise: they scale float8_e4m3fn inputs only."""
    if names := [name for name, t in descales.items() if t is not None]:
        raise FlashCoreError(f"{names[0]} is given but q is {getattr(q, 'dtype', type(q).__name__)}: descale "
                             "factors apply to float8_e4m3fn inputs only")


def refuse(given: Mapping[str, bool]) -> None:
    """Raise UnsupportedArgument for the first argument set away from its default."""
    for name, set_ in given.items():
        if set_:
            raise UnsupportedArgument(f"{name}: {UNSUPPORTED[name]}")


def device_type(q: object, fallback: object) -> str:
    """The device type a call's tensors must be on: "cpu" for CPU tensors with fallback="sdpa" (torch computes the
    same contract there), else "cuda"."""
    import torch

    return "cpu" if fallback == "sdpa" and isinstance(q, torch.Tensor) and q.device.type == "cpu" else "cuda"


def fallback_choice(value: Any) -> str:
    """fallback: "error" or "sdpa"."""
    if value not in FALLBACKS:
        raise FlashCoreError(f"fallback is {value!r}: expected 'error' (raise UnsupportedDeviceError on a GPU "
                             "that is not SM 9.0) or 'sdpa' (compute with torch off SM 9.0 and on the CPU)")
    return str(value)


def window(window_size: Any) -> tuple[int, int]:
    """(left, right), each an int in [-1, 2**30] (-1: unbounded), from what FA3's callers pass: a tuple or list of
    ints, of 0-d integer tensors or of None (unbounded, as -1), or a 2-element integer tensor (read on the host: a
    CUDA tensor costs a device sync, as it does in FA3, which passes the values to its kernel as ints)."""
    try:
        left, right = window_size
    except (TypeError, ValueError):
        raise FlashCoreError(f"window_size is {window_size!r}: expected a pair (left, right) of ints >= -1 "
                             "((-1, -1): no window)") from None
    return _window_side("left", left), _window_side("right", right)


def _window_side(name: str, value: Any) -> int:
    if value is None:
        return -1
    if hasattr(value, "dim") and hasattr(value, "item"):  # a 0-d tensor (or one element of a 2-element tensor)
        integer = not (value.dtype.is_floating_point or value.dtype.is_complex or str(value.dtype) == "torch.bool")
        if value.dim() != 0 or not integer:
            raise FlashCoreError(f"window_size {name} is a tensor of shape {tuple(value.shape)} and dtype "
                                 f"{value.dtype}: expected a 0-d integer tensor, an int or None")
        value = int(value.item())
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not -1 <= int(value) <= MAX_WINDOW:
        raise FlashCoreError(f"window_size {name} is {value!r}: expected an int in [-1, {MAX_WINDOW}] "
                             "(-1 or None: unbounded on that side)")
    return int(value)


def softcap(value: Any) -> float:
    """A finite float >= 0 (0: off)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise FlashCoreError(f"softcap is {value!r}: expected a float >= 0 (0.0: no soft-capping)")
    cap = float(value)
    if not (math.isfinite(cap) and cap >= 0):
        raise FlashCoreError(f"softcap is {cap}: it must be finite and >= 0 (0.0: no soft-capping)")
    return cap


def chunk(value: Any) -> int:
    """FA3's attention_chunk: an int >= 0 (0: off; C > 0: each query sees the keys of its chunk of C keys only)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 0 <= int(value) <= 2**30:
        raise FlashCoreError(f"attention_chunk is {value!r}: expected an int >= 0 (0: no chunks; C > 0: each query "
                             "row sees only the keys of its own chunk of C keys)")
    return int(value)


def sinks(value: Any, heads_q: int, device: torch.device, name: str = "s_aux") -> torch.Tensor | None:
    """Attention sinks (GPT-OSS; vLLM's FA3 fork's s_aux): None, or one raw logit per query head, [Hq], on q's
    device, as a contiguous float32 tensor (a floating tensor of another dtype, e.g. the model's bf16 parameter, is
    converted). Each row's softmax gets one more key of score sink[h] (not multiplied by softmax_scale) and no value."""
    import torch

    if value is None:
        return None
    if not isinstance(value, torch.Tensor):
        raise FlashCoreError(f"{name} must be a torch.Tensor or None, got {type(value).__name__}")
    if not value.dtype.is_floating_point or value.dtype == torch.float8_e4m3fn:
        raise FlashCoreError(f"{name}.dtype is {value.dtype}: attention sinks are float logits (float32, or the "
                             "model's float16 / bfloat16, converted to float32)")
    if tuple(value.shape) != (heads_q,):
        raise FlashCoreError(f"{name} has shape {tuple(value.shape)}: expected [Hq] = ({heads_q},) (one sink logit "
                             "per query head)")
    if value.device != device:
        raise FlashCoreError(f"{name} is on {value.device} but q is on {device}: all tensors must be on one device")
    validate.no_grad_needed({name: value})
    return value.detach().to(torch.float32).contiguous()


def v_transpose(value: object) -> int:
    """fc_params.fp8_v_transpose for attention_fp8's `v_transpose` ("auto", "pass" or "smem")."""
    if not isinstance(value, str) or value not in V_TRANSPOSE:
        raise FlashCoreError(f"v_transpose={value!r}: use 'auto' (by the shape), 'pass' (the kernel writes a "
                             "transposed copy of V into the workspace) or 'smem' (it transposes V in shared memory)")
    return V_TRANSPOSE[value]


def v_transpose_name(code: int) -> str:
    """fc_plan_info.fp8_v_transpose as attention_fp8 names it: "pass" or "smem"; "" for 16-bit inputs (0)."""
    return next((name for name, c in V_TRANSPOSE.items() if c == code and name != "auto"), "")


def descale(name: str, t: object, batch: int, heads_kv: int, device: torch.device) -> torch.Tensor | None:
    """None, or a float32 tensor [batch, heads_kv] on q's device (any non-negative strides: expanded views too);
    batch counts the call's sequences (packed: cu_seqlens_q's entries - 1; a cache: q's batch, not the cache's
    entries), as FA3. Its values are not read on the host (a copy would synchronize); a NaN or Inf factor gives
    NaN/Inf output."""
    import torch

    if t is None:
        return None
    if not isinstance(t, torch.Tensor):
        raise FlashCoreError(f"{name} must be a torch.Tensor or None, got {type(t).__name__}")
    if t.dtype != torch.float32:
        raise FlashCoreError(f"{name}.dtype is {t.dtype}: descale factors are torch.float32")
    if tuple(t.shape) != (batch, heads_kv):
        raise FlashCoreError(f"{name} has shape {tuple(t.shape)}: expected [B, Hkv] = {(batch, heads_kv)} (one "
                             "factor per sequence and K/V head, as FA3)")
    if t.device != device:
        raise FlashCoreError(f"{name} is on {t.device} but q is on {device}: all tensors must be on one device")
    if t.layout != torch.strided or any(s < 0 for s in t.stride()):
        raise FlashCoreError(f"{name} has stride {t.stride()}: a dense tensor with non-negative strides is needed")
    return t


def with_descales(call: Call, q_descale: object, k_descale: object, v_descale: object) -> Call:
    """An FP8 call with its three descales checked (descale): [B, Hkv], B the call's sequences (Call.batch)."""
    batch, heads_kv, device = call.batch, call.k.shape[-2], call.q.device
    return replace(call, q_descale=descale("q_descale", q_descale, batch, heads_kv, device),
                   k_descale=descale("k_descale", k_descale, batch, heads_kv, device),
                   v_descale=descale("v_descale", v_descale, batch, heads_kv, device))


def head_dim_v(head_dim: int, value: int) -> None:
    """v's head dim is q's, or another the head-dim table pairs with q's."""
    allowed = head_dims.HEAD_DIM_V.get(head_dim, (head_dim,))
    if value not in allowed:
        raise FlashCoreError(f"v's head dim is {value} with q and k's {head_dim}: expected "
                             f"{' or '.join(map(str, allowed))}")


def dense(q: object, k: object, v: object, *, causal: object = False, softmax_scale: object = None,
          out: object = None, lse: object = None, deterministic: object = False, fallback: object = "error",
          debug_fault: object = 0, num_splits: object = None, sm_margin: object = 0, tile: object = None,
          device_type: str = "cuda", fp8: bool = False) -> Call:
    """Every host-side check of `attention`, in order. `device_type` is "cuda" except with fallback="sdpa" on CPU
    tensors. fp8: the checks of flashcore.attention_fp8 (E4M3 inputs, the table's FP8 head dims, a bf16 out)."""
    q = validate.tensor("q", q, device_type, None)
    k = validate.tensor("k", k, device_type, q.device)
    v = validate.tensor("v", v, device_type, q.device)
    for name, t in (("q", q), ("k", k), ("v", v)):
        validate.rank(name, t, 4, BSHD)
    validate.no_grad_needed({"q": q, "k": k, "v": v})
    if fp8:
        validate.dtype_fp8("q", q)
    else:
        validate.dtype16("q", q)
    validate.same("k", "dtype", k.dtype, q.dtype, "q, k and v must have one dtype")
    validate.same("v", "dtype", v.dtype, q.dtype, "q, k and v must have one dtype")
    batch, seqlen_q, heads_q, head_dim = q.shape
    seqlen_k, heads_kv = k.shape[1], k.shape[2]
    if k.shape[:3] != v.shape[:3]:
        raise FlashCoreError(f"k has shape {tuple(k.shape)} but v has {tuple(v.shape)}: they must match "
                             "[B, Sk, Hkv, D] (v's head dim may differ: see below)")
    validate.same("k", "shape[0] (batch)", k.shape[0], batch, "batch sizes must match")
    validate.same("k", "shape[3] (head dim)", k.shape[3], head_dim, "head dims must match")
    if head_dim not in (head_dims.FP8 if fp8 else head_dims.SUPPORTED):
        what = f"FP8 inputs run head dims {head_dims.FP8}" if fp8 else f"FlashCore takes {head_dims.RULE} (as FA3)"
        raise FlashCoreError(f"head dim (q.shape[3]) is {head_dim}: {what}")
    if fp8 and v.shape[3] != head_dim:
        raise FlashCoreError(f"v's head dim is {v.shape[3]} with q and k's {head_dim}: FP8 inputs need one head dim")
    head_dim_v(head_dim, v.shape[3])
    if heads_q and (heads_kv == 0 or heads_q % heads_kv):
        raise FlashCoreError(f"q has {heads_q} heads and k/v have {heads_kv}: heads_q must be a multiple of "
                             "heads_kv (GQA: query head h reads k/v head h // (heads_q // heads_kv))")
    validate.at_most("q.shape[0] (batch)", batch, validate.MAX_GRID_YZ, "CUDA grid z dimension")
    validate.at_most("q.shape[2] (heads_q)", heads_q, validate.MAX_GRID_YZ, "CUDA grid y dimension")
    validate.at_most("q.shape[1] (seqlen_q)", seqlen_q, validate.MAX_SEQLEN, "32-bit row indices")
    validate.at_most("k.shape[1] (seqlen_k)", seqlen_k, validate.MAX_SEQLEN, "32-bit row indices")
    scale = validate.scale(softmax_scale, head_dim)
    causal = validate.flag("causal", causal)
    deterministic = validate.flag("deterministic", deterministic)
    fallback = fallback_choice(fallback)
    if isinstance(debug_fault, bool) or not isinstance(debug_fault, int) or not 0 <= debug_fault <= MAX_FAULT:
        raise FlashCoreError(f"debug_fault is {debug_fault!r}: known faults are 0..{MAX_FAULT} (0 = none)")
    # FA3 takes up to 256 splits; the kernel combines up to tuning.MAX_SPLITS, and a split count only changes the
    # order of the sums (FA3 too caps it, by the number of key blocks), so a larger request runs with the kernel's cap.
    splits = 0 if num_splits is None else min(validate.count("num_splits", num_splits, 1, split_combine.MAX_SPLITS,
                                                             " or None (chosen from the shapes and the GPU)"),
                                              tuning.MAX_SPLITS)
    margin = validate.count("sm_margin", sm_margin, 0, MAX_SM_MARGIN)
    if tile is not None:
        if not isinstance(tile, tuning.TileConfig):
            raise FlashCoreError(f"tile is {type(tile).__name__}: expected a flashcore.TileConfig or None (the tuned "
                                 "table's choice)")
        if bad := tile.problems():
            raise FlashCoreError("tile " + "; ".join(bad))
    inputs = {"q": q, "k": k, "v": v}
    if out is not None:
        out = validate.tensor("out", out, device_type, q.device)
        if tuple(out.shape) != out_shape(q, v):
            raise FlashCoreError(f"out has shape {tuple(out.shape)}: expected {out_shape(q, v)} ([B, Sq, Hq] of q, "
                                 "v's head dim)")
        if fp8 and out.dtype != out_dtype(q):
            raise FlashCoreError(f"out.dtype is {out.dtype}: expected {out_dtype(q)} (bf16 for FP8 inputs)")
        validate.same("out", "dtype", out.dtype, out_dtype(q), "out must have q's dtype")
        validate.self_overlap("out", out)
        validate.not_aliased("out", out, inputs)
    if lse is not None:
        import torch

        lse = validate.tensor("lse", lse, device_type, q.device)
        expected = (batch, heads_q, seqlen_q)
        if tuple(lse.shape) != expected:
            raise FlashCoreError(f"lse has shape {tuple(lse.shape)}: expected [B, Hq, Sq] = {expected}")
        if lse.dtype != torch.float32:
            raise FlashCoreError(f"lse.dtype is {lse.dtype}: expected torch.float32")
        if not lse.is_contiguous():
            raise FlashCoreError(f"lse has stride {lse.stride()}: it must be contiguous (written row-major "
                                 "[B, Hq, Sq])")
        validate.not_aliased("lse", lse, {**inputs, **({"out": out} if out is not None else {})})
    call = Call("dense", q, k, v, out, lse, causal, scale, deterministic, fallback, debug_fault, splits, margin, tile)
    if q.numel() and seqlen_k:
        for name, t in {**inputs, **({"out": out} if out is not None else {})}.items():
            validate.layout(name, t)
    return call
