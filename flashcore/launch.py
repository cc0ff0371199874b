"""A checked Call as the kernel's fc_params, and the C library's entry: the tuned tile configuration, the plan
(cached per launch signature: its workspace size), fc_attention_forward on the current stream, and the repeat-call
launch of flashcore/fastpath.py. Also what the loaded library and the GPU say about themselves (device, SM count,
kernel id, compiled points)."""

from __future__ import annotations

import ctypes
import os
from dataclasses import replace
from functools import lru_cache
from typing import TYPE_CHECKING, NoReturn

from flashcore import _lib, device_errors, fastpath, points, tuning
from flashcore.call import Call, new_out
from flashcore.errors import FlashCoreError, KernelLaunchError, UnsupportedDeviceError

if TYPE_CHECKING:
    import torch

_entry_calls = 0


def entry_calls() -> int:
    """How often this process entered the C library's fc_attention_forward (the API gate checks that a rejected
    input never gets there)."""
    return _entry_calls


# ---- the GPU and the loaded library


def device_index(device: torch.device) -> int:
    """The CUDA device index of `device` (the current device when it names none)."""
    import torch

    return device.index if device.index is not None else torch.cuda.current_device()


@lru_cache(maxsize=16)
def device_info(index: int) -> tuple[tuple[int, int], str]:
    """(compute capability, name) of CUDA device `index`."""
    import torch

    return torch.cuda.get_device_capability(index), torch.cuda.get_device_name(index)


@lru_cache(maxsize=16)
def sm_count(index: int) -> int:
    import torch

    return torch.cuda.get_device_properties(index).multi_processor_count


def use_fallback(device: str, capability: tuple[int, int], name: str, fallback: str) -> bool:
    """True when the call goes to torch; raises UnsupportedDeviceError for a non-SM-9.0 GPU without fallback."""
    if capability == (9, 0):
        return False
    if fallback == "sdpa":
        return True
    major, minor = capability
    raise UnsupportedDeviceError(f"{device} ({name}) is SM {major}.{minor}: FlashCore's kernel is built for SM 9.0 "
                                 "(H100/H200) only; pass fallback='sdpa' to compute with torch SDPA on this GPU")


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


# ---- the tile configuration


def tile_config(call: Call, index: int) -> tuning.TileConfig:
    """The call's tile configuration: its own, else the tuned table's for its bucket on this GPU and kernel. FP8
    and paged caches run the defaults. In deterministic mode the table never picks block_n, a point or a split count
    (what may move the last bits; tables differ per GPU); soft-capping and left bounds (a window's left side,
    chunks) run each head dim's short default point, so they take the table's tile order but no point."""
    if call.tile is not None:
        return call.tile
    if call.fp8 or call.page_table is not None:
        return tuning.DEFAULT
    env = (os.environ.get("FLASHCORE_TUNE"), os.environ.get("FLASHCORE_TUNE_TABLE"))
    return _table_config(index, str(call.q.dtype), call.q.shape[-1], call.q.shape[-2], call.k.shape[-2], call.max_q,
                         call.max_k, call.causal, call.deterministic, short_only(call), env)


def short_only(call: Call) -> bool:
    """Whether the call runs only on its head dim's short default point: the kernel compiles soft-capping and left
    bounds there only (kernel/run_tiles.cuh launch_wgmma)."""
    return call.softcap > 0 or call.window[0] >= 0 or call.attention_chunk > 0


@lru_cache(maxsize=1024)
def _table_config(index: int, dtype: str, head_dim: int, heads_q: int, heads_kv: int, max_q: int, max_k: int,
                  causal: bool, deterministic: bool, short: bool,
                  env: tuple[str | None, str | None]) -> tuning.TileConfig:
    """Cached: a decode step's host time is what a serving loop waits for. `env` is in the key so a changed
    FLASHCORE_TUNE or FLASHCORE_TUNE_TABLE is read again."""
    _, name = device_info(index)
    key = tuning.shape_key(head_dim, "bf16" if dtype == "torch.bfloat16" else "fp16", causal, heads_q, heads_kv,
                           max_q, max_k)
    config = tuning.config_for(key, name, sm_count(index), kernel_id())
    if deterministic:
        config = replace(config, block_n=0, point="", num_splits=0, split_ctas_per_sm=0.0)
    elif config.point and points.Point.parse(config.point) not in compiled_points(key.head_dim):
        tuning.warn_once("point", f"FlashCore runs its default tile configuration for {key.label}: the tuned table "
                                  f"names point {config.point}, which this library does not compile (make build "
                                  "compiles kernel/tuned_points.inc)")
        config = tuning.DEFAULT
    return replace(config, block_n=0, point="") if short else config


# ---- fc_params


def _strides(t: torch.Tensor) -> ctypes.Array[ctypes.c_int64]:
    # Size-1 dims may carry any stride in torch; the kernel never steps along them, so 0 is exact.
    return _lib.Strides(*[t.stride(d) if t.shape[d] > 1 else 0 for d in range(3)])


def c_dtype(q: torch.Tensor) -> int:
    """kernel/flashcore.h's fc_dtype of q."""
    import torch

    return {torch.bfloat16: _lib.FC_BF16, torch.float8_e4m3fn: _lib.FC_E4M3}.get(q.dtype, _lib.FC_FP16)


def _ptr(t: torch.Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


def params(call: Call, out: torch.Tensor, lse: torch.Tensor | None,
           config: tuning.TileConfig = tuning.DEFAULT) -> _lib.FcParams:
    """fc_params of the call writing `out` and `lse` (None: not written) with tile configuration `config`. Packed
    tensors go in as a batch of one with the sequences' offsets; a cache as itself with its lengths."""
    packed, packed_k = call.packed_q, call.layout == "varlen"  # packed queries; packed keys too (varlen)
    q, o = (t.unsqueeze(0) if packed else t for t in (call.q, out))
    k, v = (t.unsqueeze(0) if packed_k else t for t in (call.k, call.v))
    p = _lib.FcParams(
        q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), o=o.data_ptr(), lse=_ptr(lse),
        batch=call.batch, heads_q=q.shape[2], heads_kv=k.shape[2], seqlen_q=call.max_q, seqlen_k=call.max_k,
        head_dim=q.shape[3], head_dim_v=v.shape[3], q_stride=_strides(q), k_stride=_strides(k), v_stride=_strides(v),
        o_stride=_strides(o), softmax_scale=call.scale, causal=int(call.causal),
        dtype=c_dtype(q), debug_fault=call.debug_fault,
        num_splits=call.num_splits or (0 if packed else config.num_splits), deterministic=int(call.deterministic),
        sm_margin=call.sm_margin, softcap=call.softcap, fp8_v_transpose=call.v_transpose,
        **config.c_fields(),
    )  # fmt: skip
    if call.window != (-1, -1):
        p.window, p.window_left, p.window_right = 1, call.window[0], 0 if call.causal else call.window[1]
    p.attention_chunk = call.attention_chunk
    p.sinks = _ptr(call.sinks)
    for name, t in call.index_arrays().items():
        setattr(p, name, _ptr(t))
    if packed:
        p.total_q = call.q.shape[0]
    if packed_k:
        p.total_k = call.k.shape[0]
    if call.cache_batch_idx is not None:
        p.kv_batch = call.k.shape[0]
    if call.page_table is not None:
        p.page_table_stride, p.page_size, p.kv_batch = call.page_table.stride(0), call.k.shape[1], call.k.shape[0]
        p.page_table_rows = call.page_table.shape[0]
    for name in ("q_descale", "k_descale", "v_descale"):
        t = getattr(call, name)
        if t is not None:
            setattr(p, name, t.data_ptr())
            setattr(p, name + "_stride", (ctypes.c_int64 * 2)(*t.stride()))
    if call.q.is_cuda:  # the device's error word (kernel/index_errors.h): bad index data is recorded there
        p.errors = device_errors.words(call.q.device).data_ptr()
    if config.split_ctas_per_sm and not call.num_splits and not packed:
        p.num_splits = table_splits(p, call.q.device, config.split_ctas_per_sm)
    return p


def table_splits(p: _lib.FcParams, device: torch.device, ctas_per_sm: float) -> int:
    """The split count a table's CTAs-per-SM target gives this launch (tuning.splits_for_target), cached per
    launch signature. fc_plan without splits says how many query tiles there are (packed GQA or not) and the keys per
    K/V block; a decode call (the only kind a table splits) has one query tile per (batch, grid head)."""
    index = device_index(device)
    key = (*plan_key(p, index), ctas_per_sm)
    splits = _SPLITS_CACHE.get(key)
    if splits is None:
        p.num_splits = 1
        info = plan_on(device, p)
        tiles = p.batch * (p.heads_kv if info.pack_gqa else p.heads_q)
        n_blocks = -(-p.seqlen_k // max(info.block_n, 1))
        splits = tuning.splits_for_target(ctas_per_sm, tiles, n_blocks, max(sm_count(index) - p.sm_margin, 1))
        if len(_SPLITS_CACHE) >= _PLAN_CACHE_MAX:
            _SPLITS_CACHE.clear()
        _SPLITS_CACHE[key] = splits
    return splits


# ---- fc_plan and fc_attention_forward

_POINTERS = frozenset({"q", "k", "v", "o", "lse", "workspace", "workspace_bytes", "errors"})
_PLAN_CACHE: dict[tuple[object, ...], int] = {}
_PLAN_CACHE_MAX = 4096
_SPLITS_CACHE: dict[tuple[object, ...], int] = {}


def plan_key(p: _lib.FcParams, index: int) -> tuple[object, ...]:
    """What fc_plan's answer depends on: every field but the data pointers, whether lse is written, the device."""
    def value(name: str) -> object:
        v = getattr(p, name)
        if name in _lib.ARRAY_FIELDS:
            return v is not None
        return tuple(v) if isinstance(v, ctypes.Array) else v

    fields = tuple(value(f[0]) for f in p._fields_ if f[0] not in _POINTERS)
    return (index, p.lse is None, *fields)


def workspace_bytes(lib: ctypes.CDLL, p: _lib.FcParams, index: int) -> int:
    """The workspace a launch needs: fc_plan once per (shapes, strides, dtype, flags, tile knobs, device), cached;
    later calls go straight to fc_attention_forward, which validates and plans again on its own (one plan per
    call instead of two). A plan that fails raises and is not cached."""
    key = plan_key(p, index)
    need = _PLAN_CACHE.get(key)
    if need is None:
        need = int(plan(lib, p).workspace_bytes)
        if len(_PLAN_CACHE) >= _PLAN_CACHE_MAX:
            _PLAN_CACHE.clear()
        _PLAN_CACHE[key] = need
    return need


def plan(lib: ctypes.CDLL, p: _lib.FcParams) -> _lib.FcPlanInfo:
    """fc_plan on the current device; raises on failure."""
    info = _lib.FcPlanInfo()
    status = lib.fc_plan(p, info)
    if status != _lib.FC_OK:
        _raise(lib, status)
    return info


def plan_on(device: torch.device, p: _lib.FcParams) -> _lib.FcPlanInfo:
    """fc_plan with `device` current; raises on failure."""
    import torch

    with torch.cuda.device(device):
        return plan(_lib.load(), p)


def launch(p: _lib.FcParams, device: torch.device, key: tuple[object, ...] | None = None) -> None:
    """Plan (cached per shape: workspace_bytes), launch on `device`'s current stream, and remember the parameters
    under the call's fastpath signature `key` for its repeats (None: not remembered)."""
    import torch

    lib = _lib.load()
    with torch.cuda.device(device):
        need = workspace_bytes(lib, p, device_index(device))
    c_forward(lib, p, need, device)
    fastpath.remember(key, p, need)


def again(entry: fastpath.Entry, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lse_shape: tuple[int, ...],
          arrays: dict[str, torch.Tensor | None] | None = None,
          fill: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """A call with the signature of an earlier checked launch: its parameters, these pointers (and index arrays'),
    new outputs (lse filled with `fill` where rows may stay unwritten)."""
    import torch

    out = new_out(q, v)
    if fill is None:
        lse = torch.empty(lse_shape, dtype=torch.float32, device=q.device)
    else:
        lse = torch.full(lse_shape, fill, dtype=torch.float32, device=q.device)
    p = fastpath.params_for(entry, q, k, v, out, lse)
    if arrays:
        for name, t in arrays.items():
            setattr(p, name, None if t is None else t.data_ptr())
    c_forward(_lib.load(), p, entry.workspace_bytes, q.device)
    return out, lse


def c_forward(lib: ctypes.CDLL, p: _lib.FcParams, need: int, device: torch.device) -> None:
    """fc_attention_forward on the current stream of `device`, with a `need`-byte workspace; raises on failure."""
    global _entry_calls
    import torch

    with torch.cuda.device(device):
        workspace = None
        if need:
            # From torch's caching allocator (512-byte aligned), on the current stream: freed for reuse by the
            # next call on this stream, never while the kernels may still read it.
            workspace = torch.empty(need, dtype=torch.uint8, device=device)
            p.workspace, p.workspace_bytes = workspace.data_ptr(), need
        _entry_calls += 1
        status = lib.fc_attention_forward(p, torch.cuda.current_stream(device).cuda_stream)
    if status != _lib.FC_OK:
        _raise(lib, status)


def _raise(lib: ctypes.CDLL, status: int) -> NoReturn:
    message = _lib.last_error(lib)
    if status == _lib.FC_ERR_UNSUPPORTED_DEVICE:
        raise UnsupportedDeviceError(message)
    if status == _lib.FC_ERR_INVALID_ARGUMENT:
        raise FlashCoreError(message)
    raise KernelLaunchError(message)
