"""flashcore.attention and flashcore.plan: the dense [B, S, H, D] layout's public functions. Their eager path is
flashcore/dense.py (fast path, checks, flashcore.forward); under torch.compile attention is the registered op of
flashcore/ops.py. Also the names the harness reads about the loaded library (entry_calls, kernel_id,
block_n_options, compiled_points) and the head dims (flashcore/head_dims.py)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from flashcore import check, dense, forward, head_dims, points, tuning
from flashcore.call import is_fp8
from flashcore.check import MAX_FAULT
from flashcore.errors import FlashCoreError
from flashcore.launch import block_n_options, compiled_points, entry_calls, kernel_id

if TYPE_CHECKING:
    import torch

SUPPORTED_HEAD_DIMS = head_dims.SUPPORTED
FP8_HEAD_DIMS = head_dims.FP8
__all__ = ["attention", "plan", "Plan", "entry_calls", "kernel_id", "block_n_options", "compiled_points",
           "SUPPORTED_HEAD_DIMS", "FP8_HEAD_DIMS", "MAX_FAULT"]


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    softmax_scale: float | None = None,
    out: torch.Tensor | None = None,
    lse: torch.Tensor | None = None,
    deterministic: bool = False,
    fallback: str = "error",
    num_splits: int | None = None,
    sm_margin: int = 0,
    tile: tuning.TileConfig | None = None,
    debug_fault: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """O = softmax(softmax_scale * Q K^T + mask) V, with the per-row log-sum-exp. Forward only (no autograd).

    q: [B, Sq, Hq, D]; k, v: [B, Sk, Hkv, D]; CUDA tensors on one device, fp16 or bf16 (all the same);
    D a multiple of 8 up to 256, as FA3 (each runs on the smallest of the 32, 64, 96, 128, 160, 192, 224 and 256
    kernels that holds it, TMA zero-filling the missing columns); v's D the same or, with D 136..192, 104..128
    (FA3's pairs; out then [B, Sq, Hq, v's D]); flashcore.api.SUPPORTED_HEAD_DIMS lists them. Hq a multiple of Hkv
    (query head h reads K/V head h // (Hq // Hkv)); B, Hq <= 65535.
    Strided views are accepted when the last dim is contiguous and every other stride (of a dim longer than 1)
    is a non-zero multiple of 16 bytes, with a 16-byte aligned base: what TMA can encode.
    causal: bottom-right aligned (row i sees key j iff j <= i + Sk - Sq), as FlashAttention.
    softmax_scale: default 1 / sqrt(D); a Python number, finite and > 0 in float32.
    out: optional [B, Sq, Hq, D] output (q's dtype and device, no shared elements, not overlapping an input).
    lse: optional [B, Hq, Sq] float32 contiguous output (not overlapping an input or out).
    deterministic: guarantees bit-identical out and lse for the same inputs whatever launch configuration a run
        could pick: the split-KV count (below) is then chosen from the shapes alone, for a nominal 132-SM H100,
        ignoring the GPU's SM count and sm_margin. Without it, every run with the same inputs, GPU and
        sm_margin is still bit-identical (splits combined in a fixed order; the persistent grid may take tiles
        from an atomic counter, which decides only which CTA computes a tile, never its arithmetic, and FP8's
        V^T copy takes its blocks from another, which decides only who copies the same bytes), but a
        different SM count or sm_margin may pick another split count and change the last bits.
        With fallback="sdpa" it selects SDPA's math backend.
    num_splits: split-KV. None (default): when the query tiles are too few to fill the GPU (short queries,
        small batch), each tile's keys are divided among several CTAs and their fp32 partials are added in
        split order by a second kernel; 1: never split; N: N splits (at most one per K/V block, <= 128).
    sm_margin: SMs to leave to concurrent work (e.g. communication kernels) when choosing the split count.
    tile: the kernel's tile configuration (flashcore.TileConfig: keys per K/V tile, tile order, L2 share of a
        section, compile-time point of flashcore.compiled_points). None (default): the entry of the tuned table
        (flashcore/tuning.py) for this shape's bucket on this GPU and kernel, else the hand-tuned defaults (a
        TuningWarning says so once per process). Deterministic mode takes the table's tile order but never its
        block_n or point.
    fallback: "error" (default): a GPU that is not SM 9.0 raises UnsupportedDeviceError. "sdpa": compute the
        same contract with torch SDPA there and on CPU tensors (warns once per device); an SM 9.0 GPU always runs
        the kernel.
    Forward only: an input that requires grad while grad mode is on raises FlashCoreError (use torch.no_grad() or
        torch.inference_mode()); nothing is detached silently.
    Empty inputs launch nothing: Sq = 0 (or B = 0, Hq = 0) gives empty outputs; Sk = 0 gives out = 0, lse = -inf.
    Returns (out, lse). A row that sees no key gets out = 0 and lse = -inf.
    debug_fault: test-only planted fault (0 = none); see docs/design.md.
    Raises FlashCoreError (a ValueError) for any unsupported input, before anything is launched.
    """
    import torch

    if torch.compiler.is_compiling():  # traced by torch.compile: the registered op, so no graph break
        return _traced(q, k, v, causal, softmax_scale, out, lse, deterministic, fallback, num_splits, sm_margin,
                       tile, debug_fault)
    return dense.run(q, k, v, causal=causal, softmax_scale=softmax_scale, out=out, lse=lse,
                     deterministic=deterministic, fallback=fallback, num_splits=num_splits, sm_margin=sm_margin,
                     tile=tile, debug_fault=debug_fault)


def _traced(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, softmax_scale: float | None,
            out: torch.Tensor | None, lse: torch.Tensor | None, deterministic: bool, fallback: str,
            num_splits: int | None, sm_margin: int, tile: tuning.TileConfig | None,
            debug_fault: int) -> tuple[torch.Tensor, torch.Tensor]:
    """attention() under torch.compile: torch.ops.flashcore.attention (flashcore/ops.py), whose fake implementation
    Dynamo traces; out= and lse= are filled by copies in the graph. Eager calls skip the op: its dispatch adds
    75-85 % to a repeat call's host time (bench/host_cost.py on the H100)."""
    import torch

    import flashcore.ops  # noqa: F401  (registers the op; it runs flashcore/dense.py, never this module)

    if tile is not None or debug_fault:
        raise FlashCoreError("tile= and debug_fault= are not traceable by torch.compile: call attention() eagerly "
                             "(torch.compiler.disable) to pass them")
    res, res_lse = torch.ops.flashcore.attention(q, k, v, causal=causal, softmax_scale=softmax_scale,
                                                 deterministic=deterministic, fallback=fallback,
                                                 num_splits=num_splits, sm_margin=sm_margin)
    if out is not None:
        res = out.copy_(res)
    if lse is not None:
        res_lse = lse.copy_(res_lse)
    return res, res_lse


@dataclass(frozen=True)
class Plan:
    """What `attention` launches for these inputs (fc_plan_info, kernel/flashcore.h)."""

    num_splits: int  # K/V splits per tile; 1: no split-KV, no combine kernel
    pack_gqa: bool  # the query heads of a K/V head share one tile
    ctas: int  # CTAs of the attention kernel
    workspace_bytes: int
    block_n: int = 0  # keys per K/V tile
    dynamic: bool = False  # tiles taken from an atomic counter (else a static order)
    section_heads: int = 0  # (batch, head) pairs per section of the tile order
    point: str = ""  # the compile-time point launched (flashcore/points.py name)
    tile: tuning.TileConfig = tuning.DEFAULT  # the configuration asked for (the tuned table's or the caller's)
    v_transpose: str = ""  # FP8: where V is transposed, "pass" or "smem" (attention_fp8's v_transpose); "" 16-bit
    tail_tiles: int = 0  # stream-K tail (kernel/stream_tail.h): last-wave tiles cut into pieces; 0: whole tiles
    tail_pieces: int = 0  # ... the pieces they are cut into (fp32 partials, summed in piece order after the launch)


def plan(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False, deterministic: bool = False,
         num_splits: int | None = None, sm_margin: int = 0, tile: tuning.TileConfig | None = None,
         v_transpose: str | None = None) -> Plan:
    """The launch `attention` would make with these arguments (validated the same way); launches nothing.
    float8_e4m3fn inputs: the launch of flashcore.attention_fp8 (its one tile per head dim; no `tile`; v_transpose
    as attention_fp8's, default "auto", and Plan.v_transpose says which way was chosen)."""
    fp8 = is_fp8(q)
    if v_transpose is not None and not fp8:
        raise FlashCoreError("v_transpose is for float8_e4m3fn inputs (flashcore.attention_fp8): leave it None")
    if tile is not None and fp8:
        raise FlashCoreError("tile is for 16-bit inputs: float8_e4m3fn inputs run flashcore.attention_fp8's one tile "
                             "per head dim (leave it None)")
    vt_code = check.v_transpose("auto" if v_transpose is None else v_transpose) if fp8 else 0
    call = check.dense(q, k, v, causal=causal, deterministic=deterministic, num_splits=num_splits,
                       sm_margin=sm_margin, tile=tile, fp8=fp8)
    if call.empty:
        return Plan(0, False, 0, 0)
    info, config = forward.plan(replace(call, v_transpose=vt_code))
    return Plan(info.num_splits, bool(info.pack_gqa), info.ctas, info.workspace_bytes, info.block_n,
                bool(info.dynamic), info.section_heads, points.Point.from_code(info.point).name, config,
                check.v_transpose_name(info.fp8_v_transpose), info.tail_tiles, info.tail_pieces)
