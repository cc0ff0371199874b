"""The PyTorch entry point: validate everything on the host, then launch through the C ABI (or fall back)."""

from __future__ import annotations

import contextlib
import ctypes
import math
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING, NoReturn

from flashcore import _lib, fastpath, faults, points, tuning, validate
from flashcore import fallback as sdpa_fallback
from flashcore.errors import FlashCoreError, KernelLaunchError, UnsupportedDeviceError

if TYPE_CHECKING:
    import torch

SUPPORTED_HEAD_DIMS = (64, 96, 128, 192, 256)  # 96 and 192 run on the 128 and 256 kernels (kernel/launch.h)
FP8_HEAD_DIMS = (64, 128, 256)  # E4M3 inputs (flashcore/fp8.py)
# v's head dim when it differs from q and k's (DeepSeek-style prefill: q/k 192, v 128); otherwise v's is q's.
HEAD_DIM_V = {192: (192, 128)}
MAX_FAULT = int(faults.MAX_FAULT)  # debug_fault 1..4: flashcore/faults.py (kernel/common.h FaultKind)
MAX_SPLITS = tuning.MAX_SPLITS
MAX_SM_MARGIN = 1 << 20
FALLBACKS = ("error", "sdpa")
BSHD = "[B, S, H, D]"
_entry_calls = 0


def entry_calls() -> int:
    """How often this process entered the C library's fc_attention_forward (the API gate checks that a rejected
    input never gets there)."""
    return _entry_calls


@dataclass(frozen=True)
class Call:
    """A validated call: every argument checked, nothing allocated or launched yet."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    out: torch.Tensor | None
    lse: torch.Tensor | None
    causal: bool
    scale: float
    deterministic: bool
    fallback: str
    debug_fault: int
    num_splits: int = 0  # 0: automatic
    sm_margin: int = 0
    tile: tuning.TileConfig | None = None  # None: the tuned table's entry (or the defaults)

    @property
    def empty(self) -> bool:
        """No output element, or no key to attend to: a defined result without a launch."""
        return self.q.numel() == 0 or self.k.shape[1] == 0


def check_call(q: object, k: object, v: object, *, causal: object = False, softmax_scale: object = None,
               out: object = None, lse: object = None, deterministic: object = False, fallback: object = "error",
               debug_fault: object = 0, num_splits: object = None, sm_margin: object = 0, tile: object = None,
               device_type: str = "cuda", fp8: bool = False) -> Call:
    """Every host-side check of `attention`, in order; raises FlashCoreError. `device_type` is "cuda" except in
    the CPU tests, which run the same checks on CPU tensors. fp8: the checks of flashcore.attention_fp8 (E4M3
    inputs, head dims 64, 128 and 256, a bf16 out)."""
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
    if head_dim not in (FP8_HEAD_DIMS if fp8 else SUPPORTED_HEAD_DIMS):
        what = f"FP8 inputs run head dims {FP8_HEAD_DIMS}" if fp8 else f"FlashCore supports {SUPPORTED_HEAD_DIMS}"
        raise FlashCoreError(f"head dim (q.shape[3]) is {head_dim}: {what}")
    if fp8 and v.shape[3] != head_dim:
        raise FlashCoreError(f"v's head dim is {v.shape[3]} with q and k's {head_dim}: FP8 inputs need one head dim")
    check_head_dim_v(head_dim, v.shape[3])
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
    if fallback not in FALLBACKS:
        raise FlashCoreError(f"fallback is {fallback!r}: expected 'error' (raise UnsupportedDeviceError on a GPU "
                             "that is not SM 9.0) or 'sdpa' (compute with torch SDPA there)")
    if isinstance(debug_fault, bool) or not isinstance(debug_fault, int) or not 0 <= debug_fault <= MAX_FAULT:
        raise FlashCoreError(f"debug_fault is {debug_fault!r}: known faults are 0..{MAX_FAULT} (0 = none)")
    splits = 0 if num_splits is None else validate.count("num_splits", num_splits, 1, MAX_SPLITS,
                                                         " or None (chosen from the shapes and the GPU)")
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
    call = Call(q, k, v, out, lse, causal, scale, deterministic, str(fallback), debug_fault, splits, margin, tile)
    if not call.empty:
        for name, t in {**inputs, **({"out": out} if out is not None else {})}.items():
            validate.layout(name, t)
    return call


def check_head_dim_v(head_dim: int, head_dim_v: int) -> None:
    """v's head dim is q's, or one HEAD_DIM_V allows for q's."""
    allowed = HEAD_DIM_V.get(head_dim, (head_dim,))
    if head_dim_v not in allowed:
        raise FlashCoreError(f"v's head dim is {head_dim_v} with q and k's {head_dim}: expected "
                             f"{' or '.join(map(str, allowed))}")


def out_shape(q: torch.Tensor, v: torch.Tensor) -> tuple[int, ...]:
    """The output's shape: q's, with v's head dim."""
    return (*q.shape[:-1], v.shape[-1])


def is_fp8(q: object) -> bool:
    """q is a float8_e4m3fn tensor: flashcore.attention_fp8's input."""
    import torch

    return isinstance(q, torch.Tensor) and q.dtype == torch.float8_e4m3fn


def out_dtype(q: torch.Tensor) -> torch.dtype:
    """The output's dtype: q's, or bf16 for FP8 inputs (FA3's)."""
    import torch

    return torch.bfloat16 if is_fp8(q) else q.dtype


def c_dtype(q: torch.Tensor) -> int:
    """kernel/flashcore.h's fc_dtype of q."""
    import torch

    return {torch.bfloat16: _lib.FC_BF16, torch.float8_e4m3fn: _lib.FC_E4M3}.get(q.dtype, _lib.FC_FP16)


def new_out(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """An uninitialized contiguous output for q and v (out_dtype(q), q's device, v's head dim)."""
    import torch

    return torch.empty(out_shape(q, v), dtype=out_dtype(q), device=q.device)


def device_type(q: object, fallback: object) -> str:
    """The device type a call's tensors must be on: "cpu" for CPU tensors with fallback="sdpa" (torch computes the
    same contract there), else "cuda"."""
    import torch

    return "cpu" if fallback == "sdpa" and isinstance(q, torch.Tensor) and q.device.type == "cpu" else "cuda"


def device_index(device: torch.device) -> int:
    """The CUDA device index of `device` (the current device when it names none)."""
    import torch

    return device.index if device.index is not None else torch.cuda.current_device()


@lru_cache(maxsize=16)
def _device_info(index: int) -> tuple[tuple[int, int], str]:
    import torch

    return torch.cuda.get_device_capability(index), torch.cuda.get_device_name(index)


@lru_cache(maxsize=16)
def _sm_count(index: int) -> int:
    import torch

    return torch.cuda.get_device_properties(index).multi_processor_count


@lru_cache(maxsize=1)
def kernel_id() -> str:
    """fc_kernel_id() of the loaded library: the hash of the kernel sources it was built from."""
    raw = _lib.load().fc_kernel_id()
    return raw.decode() if raw else ""


@lru_cache(maxsize=8)
def block_n_options(head_dim: int) -> tuple[int, ...]:
    """fc_block_n_options(): the BLOCK_N values the loaded library compiled for `head_dim` (empty if none)."""
    buf = (ctypes.c_int32 * 4)()
    return tuple(buf[i] for i in range(_lib.load().fc_block_n_options(head_dim, buf, 4)))


@lru_cache(maxsize=16)
def compiled_points(head_dim: int, defaults_only: bool = False) -> tuple[points.Point, ...]:
    """fc_points(): the compile-time points the loaded library has for `head_dim`, its defaults first (only those
    with defaults_only)."""
    return points.library_points(_lib.load(), head_dim, defaults_only)


def tile_config(call: Call, index: int, name: str) -> tuning.TileConfig:
    """The call's tile configuration: its own, else the tuned table's for its bucket on this GPU and kernel. In
    deterministic mode the table never picks block_n, a point or a split count (what may move the last bits; tables
    differ per GPU). A table point this library did not compile runs the defaults, said once (rebuild: make
    build)."""
    if call.tile is not None:
        return call.tile
    import torch

    q, k = call.q, call.k
    dtype = "bf16" if q.dtype == torch.bfloat16 else "fp16"
    key = tuning.shape_key(q.shape[3], dtype, call.causal, q.shape[2], k.shape[2], q.shape[1], k.shape[1])
    config = tuning.config_for(key, name, _sm_count(index), kernel_id())
    if call.deterministic:
        return replace(config, block_n=0, point="", num_splits=0)
    if config.point and points.Point.parse(config.point) not in compiled_points(key.head_dim):
        tuning.warn_once("point", f"FlashCore runs its default tile configuration for {key.label}: the tuned table "
                                  f"names point {config.point}, which this library does not compile (make build "
                                  "compiles kernel/tuned_points.inc)")
        return tuning.DEFAULT
    return config


def use_fallback(device: str, capability: tuple[int, int], name: str, fallback: str) -> bool:
    """True when the call goes to torch SDPA; raises UnsupportedDeviceError for a non-SM-9.0 GPU without fallback."""
    if capability == (9, 0):
        return False
    if fallback == "sdpa":
        return True
    major, minor = capability
    raise UnsupportedDeviceError(f"{device} ({name}) is SM {major}.{minor}: FlashCore's kernel is built for SM 9.0 "
                                 "(H100/H200) only; pass fallback='sdpa' to compute with torch SDPA on this GPU")


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
    D in 64, 96, 128, 192, 256 (96 and 192 run on the 128 and 256 kernels, TMA zero-filling the missing columns);
    v's D the same or, with D 192, 128 (out then [B, Sq, Hq, 128]); Hq a multiple of Hkv (query head h reads K/V
    head h // (Hq // Hkv)); B, Hq <= 65535.
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
    key = None
    if out is None and lse is None and tile is None and debug_fault == 0:  # a repeat call: flashcore/fastpath.py
        key = fastpath.signature(q, k, v, causal, softmax_scale, deterministic, fallback, num_splits, sm_margin)
        entry = fastpath.lookup(key)
        if entry is not None and fastpath.aligned(q, k, v):
            return _launch_again(entry, q, k, v)
    # fallback="sdpa" takes CPU tensors too: torch SDPA computes the same contract there (testable without a GPU).
    on_cpu = device_type(q, fallback) == "cpu"
    call = check_call(q, k, v, causal=causal, softmax_scale=softmax_scale, out=out, lse=lse,
                      deterministic=deterministic, fallback=fallback, debug_fault=debug_fault,
                      num_splits=num_splits, sm_margin=sm_margin, tile=tile, device_type="cpu" if on_cpu else "cuda")
    q, k, v = call.q, call.k, call.v
    if on_cpu:
        index, name, sdpa = -1, "CPU", True
    else:
        index = device_index(q.device)
        capability, name = _device_info(index)
        sdpa = use_fallback(str(q.device), capability, name, call.fallback)
    out, lse = dense_outputs(call)
    if call.empty:
        out.zero_()
        lse.fill_(-math.inf)
        return out, lse
    if sdpa:
        sdpa_fallback.warn_once(f"{q.device} ({name})")
        with torch.cuda.device(q.device) if not on_cpu else contextlib.nullcontext():
            sdpa_fallback.attention(q, k, v, out, lse, call.causal, call.scale, call.deterministic)
        return out, lse

    launch(_params(call, out, lse, tile_config(call, index, name)), q.device, key)
    return out, lse


def dense_outputs(call: Call) -> tuple[torch.Tensor, torch.Tensor]:
    """The call's out and lse ([B, Hq, Sq] float32), new where the caller passed none."""
    import torch

    q = call.q
    out = new_out(q, call.v) if call.out is None else call.out
    if call.lse is not None:
        return out, call.lse
    return out, torch.empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32, device=q.device)


def launch(params: _lib.FcParams, device: torch.device, key: tuple[object, ...] | None = None) -> None:
    """Plan (cached per shape: workspace_bytes), launch on `device`'s current stream, and remember the parameters
    under the call's fastpath signature `key` for its repeats (None: not remembered)."""
    import torch

    lib = _lib.load()
    with torch.cuda.device(device):
        need = workspace_bytes(lib, params, device_index(device))
    _forward(lib, params, need, device)
    fastpath.remember(key, params, need)


def _launch_again(entry: fastpath.Entry, q: torch.Tensor, k: torch.Tensor,
                  v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A call with the signature of an earlier checked launch: its parameters, these pointers, new outputs."""
    import torch

    out = new_out(q, v)
    lse = torch.empty(entry.lse_shape, dtype=torch.float32, device=q.device)
    _forward(_lib.load(), fastpath.params_for(entry, q, k, v, out, lse), entry.workspace_bytes, q.device)
    return out, lse


def _forward(lib: ctypes.CDLL, params: _lib.FcParams, need: int, device: torch.device) -> None:
    """fc_attention_forward on the current stream of `device`, with a `need`-byte workspace; raises on failure."""
    global _entry_calls
    import torch

    with torch.cuda.device(device):
        workspace = None
        if need:
            # From torch's caching allocator (512-byte aligned), on the current stream: freed for reuse by the
            # next call on this stream, never while the kernels may still read it.
            workspace = torch.empty(need, dtype=torch.uint8, device=device)
            params.workspace, params.workspace_bytes = workspace.data_ptr(), need
        _entry_calls += 1
        status = lib.fc_attention_forward(params, torch.cuda.current_stream(device).cuda_stream)
    if status != _lib.FC_OK:
        _raise(lib, status)


def _traced(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, softmax_scale: float | None,
            out: torch.Tensor | None, lse: torch.Tensor | None, deterministic: bool, fallback: str,
            num_splits: int | None, sm_margin: int, tile: tuning.TileConfig | None,
            debug_fault: int) -> tuple[torch.Tensor, torch.Tensor]:
    """attention() under torch.compile: torch.ops.flashcore.attention (flashcore/ops.py), whose fake implementation
    Dynamo traces; out= and lse= are filled by copies in the graph. Eager calls skip the op: its dispatch adds
    75-85 % to a repeat call's host time (bench/host_cost.py on the H100)."""
    import torch

    import flashcore.ops  # noqa: F401  (registers the op)

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
    import torch

    from flashcore.fp8 import v_transpose_code, v_transpose_name

    fp8 = is_fp8(q)
    if v_transpose is not None and not fp8:
        raise FlashCoreError("v_transpose is for float8_e4m3fn inputs (flashcore.attention_fp8): leave it None")
    if tile is not None and fp8:
        raise FlashCoreError("tile is for 16-bit inputs: float8_e4m3fn inputs run flashcore.attention_fp8's one tile "
                             "per head dim (leave it None)")
    vt_code = v_transpose_code("auto" if v_transpose is None else v_transpose) if fp8 else 0
    call = check_call(q, k, v, causal=causal, deterministic=deterministic, num_splits=num_splits,
                      sm_margin=sm_margin, tile=tile, fp8=fp8)
    if call.empty:
        return Plan(0, False, 0, 0)
    index = device_index(call.q.device)
    capability, name = _device_info(index)
    use_fallback(str(call.q.device), capability, name, "error")
    lib = _lib.load()
    config = tuning.DEFAULT if fp8 else tile_config(call, index, name)
    # fc_plan checks o like q; q itself stands in (nothing is written). FP8: o is bf16, so a bf16 one is allocated.
    params = _params(call, dense_outputs(call)[0] if fp8 else call.q, None, config)
    params.fp8_v_transpose = vt_code
    with torch.cuda.device(call.q.device):
        info = _plan(lib, params)
    return Plan(info.num_splits, bool(info.pack_gqa), info.ctas, info.workspace_bytes, info.block_n,
                bool(info.dynamic), info.section_heads, points.Point.from_code(info.point).name, config,
                v_transpose_name(info.fp8_v_transpose), info.tail_tiles, info.tail_pieces)


def _params(call: Call, out: torch.Tensor, lse: torch.Tensor | None,
            config: tuning.TileConfig = tuning.DEFAULT) -> _lib.FcParams:

    q, k, v = call.q, call.k, call.v
    lse_ptr = lse.data_ptr() if lse is not None else None
    return _lib.FcParams(
        q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), o=out.data_ptr(), lse=lse_ptr,
        batch=q.shape[0], heads_q=q.shape[2], heads_kv=k.shape[2], seqlen_q=q.shape[1], seqlen_k=k.shape[1],
        head_dim=q.shape[3], head_dim_v=v.shape[3], q_stride=_strides(q), k_stride=_strides(k), v_stride=_strides(v),
        o_stride=_strides(out), softmax_scale=call.scale, causal=int(call.causal),
        dtype=c_dtype(q), debug_fault=call.debug_fault,
        num_splits=call.num_splits or config.num_splits, deterministic=int(call.deterministic),
        sm_margin=call.sm_margin,
        **config.c_fields(),
    )  # fmt: skip


_POINTERS = frozenset({"q", "k", "v", "o", "lse", "workspace", "workspace_bytes"})
_PLAN_CACHE: dict[tuple[object, ...], int] = {}
_PLAN_CACHE_MAX = 4096


def plan_key(params: _lib.FcParams, device_index: int) -> tuple[object, ...]:
    """What fc_plan's answer depends on: every field but the data pointers, whether lse is written, the device."""
    def value(name: str) -> object:
        v = getattr(params, name)
        if name in _lib.ARRAY_FIELDS:
            return v is not None
        return tuple(v) if isinstance(v, ctypes.Array) else v

    fields = tuple(value(f[0]) for f in params._fields_ if f[0] not in _POINTERS)
    return (device_index, params.lse is None, *fields)


def workspace_bytes(lib: ctypes.CDLL, params: _lib.FcParams, device_index: int) -> int:
    """The workspace a launch needs: fc_plan once per (shapes, strides, dtype, flags, tile knobs, device), cached;
    later calls go straight to fc_attention_forward, which validates and plans again on its own (one plan per
    call instead of two). A plan that fails raises and is not cached."""
    key = plan_key(params, device_index)
    need = _PLAN_CACHE.get(key)
    if need is None:
        need = int(_plan(lib, params).workspace_bytes)
        if len(_PLAN_CACHE) >= _PLAN_CACHE_MAX:
            _PLAN_CACHE.clear()
        _PLAN_CACHE[key] = need
    return need


def _plan(lib: ctypes.CDLL, params: _lib.FcParams) -> _lib.FcPlanInfo:
    info = _lib.FcPlanInfo()
    status = lib.fc_plan(params, info)
    if status != _lib.FC_OK:
        _raise(lib, status)
    return info


def _raise(lib: ctypes.CDLL, status: int) -> NoReturn:
    message = _lib.last_error(lib)
    if status == _lib.FC_ERR_UNSUPPORTED_DEVICE:
        raise UnsupportedDeviceError(message)
    if status == _lib.FC_ERR_INVALID_ARGUMENT:
        raise FlashCoreError(message)
    raise KernelLaunchError(message)


def _strides(t: torch.Tensor) -> ctypes.Array[ctypes.c_int64]:
    # Size-1 dims may carry any stride in torch; the kernel never steps along them, so 0 is exact.
    return _lib.Strides(*[t.stride(d) if t.shape[d] > 1 else 0 for d in range(3)])
