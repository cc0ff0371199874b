"""FP8 inputs with what the FP8 kernels do not compile: a sliding window, softcap, chunked attention, attention sinks,
fallback="sdpa" (no Hopper GPU), or a head dim without an FP8 kernel (96, 192, ...: FA3's FP8 serves them).
flash_attn_func and flash_attn_varlen_func run such a call on the 16-bit path over the inputs dequantized to bf16,
each value times its factor as FA3 defines it (q * q_descale[b, h // (Hq / Hkv)],
k * k_descale[b, h], v * v_descale[b, h], factors float32 [B, Hkv], None meaning 1). Refusing them left FA3's FP8
callers with a window or softcap no path at all.

What the caller gets: attention over those values computed with bf16 operands (P in bf16 too, where FA3 rounds it to
E4M3 before P V), closer to exact than FA3's FP8 kernel and not bit-equal to it; out is bf16, as FA3's FP8 out. The
cost: passes that write bf16 copies of q, k and v (each product rounded once to bf16), then the 16-bit kernel's
time, not FP8's (the product is taken in float32: 4 bytes per element of temporaries, q, k and v one at a time).
Any head dim the 16-bit kernels run, v's q's or a pair of the head-dim table (FA3's FP8 has 192 with 128). A KV
cache is not dequantized here (a paged cache's pages may be shared by sequences with different factors):
flash_attn_with_kvcache runs these on a bf16 copy of its raw values instead (flashcore/fp8_cache.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flashcore import check, head_dims, launch, reference, validate
from flashcore.errors import FlashCoreError

if TYPE_CHECKING:
    import torch

NAMES = ("q", "k", "v")


def wanted(q: Any, window_size: Any, softcap: Any, attention_chunk: Any, fallback: Any, s_aux: Any) -> bool:
    """Whether an FP8 call asks for something only the 16-bit path has (then it runs on dequantized inputs):
    fallback="sdpa" counts only where it acts (a CPU tensor or a GPU other than SM 9.0; on an H100/H200 the FP8
    kernel runs as without it)."""
    asked = check.fp8_unsupported(window_size, softcap, attention_chunk, check.fallback_choice(fallback), s_aux)
    asked["fp8 fallback"] = asked["fp8 fallback"] and _fallback_acts(q)
    # a head dim FA3's FP8 serves that no FP8 kernel is compiled for (96, 192, ...): the 16-bit kernels hold it
    asked["fp8 head dim"] = getattr(q, "dim", lambda: 0)() >= 1 and q.shape[-1] not in head_dims.FP8
    return any(asked.values())


def _fallback_acts(q: Any) -> bool:
    """fallback="sdpa" computes q's call with torch: a CPU tensor, or a GPU FlashCore's kernels do not run on
    (launch.use_fallback's rule, the one forward.py applies)."""
    import torch

    if not isinstance(q, torch.Tensor) or q.device.type != "cuda":
        return True
    capability, name = launch.device_info(launch.device_index(q.device))
    return launch.use_fallback(str(q.device), capability, name, "sdpa")


def _inputs(tensors: tuple[Any, Any, Any], rank: int, layout: str) -> tuple[torch.Tensor, ...]:
    """q, k, v: torch tensors of one FP8 dtype and device, of `rank` dims, Hq a multiple of Hkv (as the FP8 path)."""
    q = validate.tensor("q", tensors[0], getattr(getattr(tensors[0], "device", None), "type", "cuda"), None)
    for name, t in zip(NAMES, tensors, strict=True):
        validate.tensor(name, t, q.device.type, q.device)
        validate.dtype_fp8(name, t)
        validate.rank(name, t, rank, layout)
    q, k, v = tensors
    if k.shape[-2] < 1 or q.shape[-2] % k.shape[-2] != 0 or v.shape[-2] != k.shape[-2]:
        raise FlashCoreError(f"q has {q.shape[-2]} heads and k, v {k.shape[-2]}, {v.shape[-2]}: k and v need the "
                             "same head count, a divisor of q's (GQA/MQA)")
    # Checked here, before the factors multiply them: a [B, Hkv] factor broadcasts a k or v of batch (or rows) 1 to
    # B, and the 16-bit path would then see shapes that match
    if k.shape[:-1] != v.shape[:-1] or (rank == 4 and q.shape[0] != k.shape[0]):
        raise FlashCoreError(f"q, k and v have shapes {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}: expected "
                             f"{layout}, k and v alike but for the head dim" + (", one batch" if rank == 4 else ""))
    # q's and k's head dim one the 16-bit kernels run, v's q's or a pair of the table's (FA3's FP8 192 with 128)
    d = q.shape[-1]
    if d not in head_dims.SUPPORTED or k.shape[-1] != d or v.shape[-1] not in head_dims.HEAD_DIM_V[d]:
        raise FlashCoreError(f"head dims are {d}, {k.shape[-1]}, {v.shape[-1]} (q, k, v): FP8 inputs run q's and k's "
                             f"head dim of the {head_dims.describe(head_dims.SUPPORTED)}, v's the same or one the "
                             "head-dim table pairs with it (192 with 128)")
    return q, k, v


def _factors(descales: dict[str, Any], batch: int, heads_kv: int, device: torch.device) -> list[torch.Tensor | None]:
    """q's, k's and v's [B, Hkv] factors as check.descale takes them (None: 1)."""
    return [check.descale(f"{n}_descale", descales[f"{n}_descale"], batch, heads_kv, device) for n in NAMES]


def dense(q: Any, k: Any, v: Any, descales: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """[B, S, H, D] FP8 q, k, v and their [B, Hkv] factors -> bf16 q, k, v (each float32 product rounded once)."""
    import torch

    q, k, v = _inputs((q, k, v), 4, "[B, S, H, D]")
    heads_kv = k.shape[2]
    factors = _factors(descales, q.shape[0], heads_kv, q.device)
    return tuple(  # type: ignore[return-value]
        reference.dequantize(x, f, heads_kv).to(torch.bfloat16) for x, f in zip((q, k, v), factors, strict=True))


def sequence_of_rows(cu_seqlens: Any, rows: int, name: str, device: torch.device) -> torch.Tensor:
    """The sequence of each packed row: b for rows [cu_seqlens[b], cu_seqlens[b + 1]) (rows past the last offset get
    the last sequence: no sequence reads them). On the device, without a host copy (a copy would synchronize)."""
    import torch

    if (not isinstance(cu_seqlens, torch.Tensor) or cu_seqlens.dtype != torch.int32 or cu_seqlens.dim() != 1
            or cu_seqlens.shape[0] < 2):
        got = (f"{cu_seqlens.dtype} {tuple(cu_seqlens.shape)}" if isinstance(cu_seqlens, torch.Tensor)
               else repr(cu_seqlens))
        raise FlashCoreError(f"{name} must be an int32 tensor [B + 1] (B >= 1), got {got}")
    if cu_seqlens.device != device:
        raise FlashCoreError(f"{name} is on {cu_seqlens.device} but q is on {device}: all tensors must be on one "
                             "device")
    index = torch.arange(rows, device=device, dtype=cu_seqlens.dtype)
    seq = torch.searchsorted(cu_seqlens[1:].contiguous(), index, right=True)
    return seq.clamp_(max=cu_seqlens.shape[0] - 2)


def times_factor(x: torch.Tensor, factor: torch.Tensor | None, heads_kv: int,
                 rows: torch.Tensor | None = None) -> torch.Tensor:
    """x ([B, S, H, E], or packed [total, H, E] whose rows belong to sequences `rows`) as float32 times its
    sequence's [B, Hkv] factor (None: 1), head h taking factor h // (H / Hkv): reference.dequantize's rule, a packed
    row read as a sequence of one row with its own sequence's factors."""
    if rows is None:
        return reference.dequantize(x, factor, heads_kv)
    return reference.dequantize(x.unsqueeze(1), None if factor is None else factor[rows], heads_kv).squeeze(1)


def packed(q: Any, k: Any, v: Any, cu_seqlens_q: Any, cu_seqlens_k: Any, descales: dict[str, Any]
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """[total, H, D] packed FP8 q, k, v and their [B, Hkv] factors (B = len(cu_seqlens_q) - 1) -> bf16 q, k, v."""
    import torch

    q, k, v = _inputs((q, k, v), 3, "[total, H, D] (packed rows)")
    rows_q = sequence_of_rows(cu_seqlens_q, q.shape[0], "cu_seqlens_q", q.device)
    rows_k = sequence_of_rows(cu_seqlens_k, k.shape[0], "cu_seqlens_k", q.device)
    batch, heads_kv = cu_seqlens_q.shape[0] - 1, k.shape[1]
    if cu_seqlens_k.shape[0] - 1 != batch:
        raise FlashCoreError(f"cu_seqlens_k has {cu_seqlens_k.shape[0]} entries and cu_seqlens_q "
                             f"{cu_seqlens_q.shape[0]}: one offset per sequence, plus one")
    factors = _factors(descales, batch, heads_kv, q.device)
    return tuple(  # type: ignore[return-value]
        times_factor(x, f, heads_kv, rows).to(torch.bfloat16)
        for x, f, rows in zip((q, k, v), factors, (rows_q, rows_k, rows_k), strict=True))
