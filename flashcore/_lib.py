"""ctypes binding to build/libflashcore.so (the C ABI of kernel/flashcore.h). No torch extension build."""

from __future__ import annotations

import ctypes
import os
from functools import lru_cache
from pathlib import Path

FC_OK = 0
FC_ERR_INVALID_ARGUMENT = 1
FC_ERR_UNSUPPORTED_DEVICE = 2
FC_ERR_CUDA = 3
FC_FP16 = 0
FC_BF16 = 1
FC_E4M3 = 2

Strides = ctypes.c_int64 * 3


class FcParams(ctypes.Structure):
    """Mirror of `fc_params` in kernel/flashcore.h (field order and types must match)."""

    _fields_ = [
        ("q", ctypes.c_void_p),
        ("k", ctypes.c_void_p),
        ("v", ctypes.c_void_p),
        ("o", ctypes.c_void_p),
        ("lse", ctypes.c_void_p),
        ("batch", ctypes.c_int64),
        ("heads_q", ctypes.c_int64),
        ("heads_kv", ctypes.c_int64),
        ("seqlen_q", ctypes.c_int64),
        ("seqlen_k", ctypes.c_int64),
        ("head_dim", ctypes.c_int64),
        ("q_stride", Strides),
        ("k_stride", Strides),
        ("v_stride", Strides),
        ("o_stride", Strides),
        ("softmax_scale", ctypes.c_float),
        ("causal", ctypes.c_int32),
        ("dtype", ctypes.c_int32),
        ("debug_fault", ctypes.c_int32),
        ("num_splits", ctypes.c_int32),
        ("deterministic", ctypes.c_int32),
        ("sm_margin", ctypes.c_int32),
        ("workspace", ctypes.c_void_p),
        ("workspace_bytes", ctypes.c_int64),
        ("block_n", ctypes.c_int32),
        ("schedule", ctypes.c_int32),
        ("l2_section_pct", ctypes.c_int32),
        ("point", ctypes.c_int32),
        ("cu_seqlens_q", ctypes.c_void_p),
        ("cu_seqlens_k", ctypes.c_void_p),
        ("seqused_q", ctypes.c_void_p),
        ("seqused_k", ctypes.c_void_p),
        ("kv_batch_idx", ctypes.c_void_p),
        ("leftpad_k", ctypes.c_void_p),
        ("total_q", ctypes.c_int64),
        ("total_k", ctypes.c_int64),
        ("kv_batch", ctypes.c_int64),
        ("window", ctypes.c_int32),
        ("window_left", ctypes.c_int32),
        ("window_right", ctypes.c_int32),
        ("softcap", ctypes.c_float),
        ("head_dim_v", ctypes.c_int64),
        ("page_table", ctypes.c_void_p),
        ("page_table_stride", ctypes.c_int64),
        ("page_size", ctypes.c_int64),
        ("q_descale", ctypes.c_void_p),
        ("k_descale", ctypes.c_void_p),
        ("v_descale", ctypes.c_void_p),
        ("q_descale_stride", ctypes.c_int64 * 2),
        ("k_descale_stride", ctypes.c_int64 * 2),
        ("v_descale_stride", ctypes.c_int64 * 2),
        ("fp8_v_transpose", ctypes.c_int32),
        ("attention_chunk", ctypes.c_int32),
        ("sinks", ctypes.c_void_p),
        ("page_table_rows", ctypes.c_int64),
        ("errors", ctypes.c_void_p),
    ]


# fc_params' device int32 index arrays, the one list of them: a Call names its index tensors by these fields
# (flashcore.call.Call.index_arrays), flashcore/launch.py `params` sets them from it and the repeat-call launch
# (launch.again) swaps their pointers.
INDEX_ARRAYS = ("cu_seqlens_q", "cu_seqlens_k", "seqused_q", "seqused_k", "kv_batch_idx", "leftpad_k", "page_table")
# Device-array fields: fc_plan's answer depends on whether each is set, never on its address.
ARRAY_FIELDS = frozenset((*INDEX_ARRAYS, "q_descale", "k_descale", "v_descale", "sinks"))


class FcPlanInfo(ctypes.Structure):
    """Mirror of `fc_plan_info` in kernel/flashcore.h."""

    _fields_ = [
        ("num_splits", ctypes.c_int32),
        ("pack_gqa", ctypes.c_int32),
        ("ctas", ctypes.c_int64),
        ("workspace_bytes", ctypes.c_int64),
        ("block_n", ctypes.c_int32),
        ("dynamic", ctypes.c_int32),
        ("section_heads", ctypes.c_int32),
        ("point", ctypes.c_int32),
        ("fp8_v_transpose", ctypes.c_int32),
        ("tail_tiles", ctypes.c_int32),
        ("tail_pieces", ctypes.c_int32),
    ]


class FcAppendParams(ctypes.Structure):
    """Mirror of `fc_append_params` in kernel/flashcore.h (field order and types must match)."""

    _fields_ = [
        ("dtype", ctypes.c_int32),
        ("batch", ctypes.c_int64),
        ("heads_kv", ctypes.c_int64),
        ("head_dim", ctypes.c_int64),
        ("head_dim_v", ctypes.c_int64),
        ("k_new", ctypes.c_void_p),
        ("v_new", ctypes.c_void_p),
        ("k_new_stride", Strides),
        ("v_new_stride", Strides),
        ("seqlen_new", ctypes.c_int64),
        ("total_new", ctypes.c_int64),
        ("cu_seqlens_k_new", ctypes.c_void_p),
        ("k_cache", ctypes.c_void_p),
        ("v_cache", ctypes.c_void_p),
        ("k_cache_stride", Strides),
        ("v_cache_stride", Strides),
        ("cache_batch", ctypes.c_int64),
        ("capacity", ctypes.c_int64),
        ("page_table", ctypes.c_void_p),
        ("page_table_stride", ctypes.c_int64),
        ("page_table_rows", ctypes.c_int64),
        ("page_size", ctypes.c_int64),
        ("cache_seqlens", ctypes.c_void_p),
        ("cache_batch_idx", ctypes.c_void_p),
        ("seqlens_out", ctypes.c_void_p),
        ("rotary_cos", ctypes.c_void_p),
        ("rotary_sin", ctypes.c_void_p),
        ("rotary_rows", ctypes.c_int64),
        ("rotary_dim", ctypes.c_int64),
        ("rotary_cos_stride", ctypes.c_int64),
        ("rotary_sin_stride", ctypes.c_int64),
        ("rotary_interleaved", ctypes.c_int32),
        ("rotary_seqlens", ctypes.c_void_p),
        ("q", ctypes.c_void_p),
        ("q_out", ctypes.c_void_p),
        ("heads_q", ctypes.c_int64),
        ("seqlen_q", ctypes.c_int64),
        ("total_q", ctypes.c_int64),
        ("q_stride", Strides),
        ("q_out_stride", Strides),
        ("cu_seqlens_q", ctypes.c_void_p),
        ("q_rotary_per_row", ctypes.c_int32),
        ("errors", ctypes.c_void_p),
    ]


PACKAGED = Path(__file__).resolve().parent / "lib" / "libflashcore.so"  # shipped by `pip install .` (setup.py)
CHECKOUT = Path(__file__).resolve().parent.parent  # a source checkout (editable install): its build/


def library_path() -> Path:
    """Where the shared library is: $FLASHCORE_LIB; else the one `pip install .` put in the package; else, in a
    source checkout, build/libflashcore.so (make build)."""
    env = os.environ.get("FLASHCORE_LIB")
    if env:
        return Path(env)
    if PACKAGED.is_file() or not (CHECKOUT / "Makefile").is_file():
        return PACKAGED
    return CHECKOUT / "build" / "libflashcore.so"


@lru_cache(maxsize=1)
def load() -> ctypes.CDLL:
    path = library_path()
    if not path.is_file():
        how = ("run `make build` in the checkout" if path != PACKAGED else
               "this installation has no kernel (no nvcc when it was installed): reinstall with nvcc on PATH "
               "(pip install .), or set FLASHCORE_LIB to a built libflashcore.so")
        raise FileNotFoundError(f"FlashCore library not found at {path}: {how}")
    return open_library(path)


def open_library(path: Path) -> ctypes.CDLL:
    """The library at `path` with the C signatures of kernel/flashcore.h declared (not cached: load() is the
    process's library; make tune also reads the default build's points beside the tune build it loads)."""
    lib = ctypes.CDLL(str(path))
    lib.fc_attention_forward.argtypes = [ctypes.POINTER(FcParams), ctypes.c_void_p]
    lib.fc_attention_forward.restype = ctypes.c_int
    lib.fc_plan.argtypes = [ctypes.POINTER(FcParams), ctypes.POINTER(FcPlanInfo)]
    lib.fc_plan.restype = ctypes.c_int
    lib.fc_last_error.argtypes = []
    lib.fc_last_error.restype = ctypes.c_char_p
    lib.fc_device_supported.argtypes = [ctypes.c_int]
    lib.fc_device_supported.restype = ctypes.c_int
    lib.fc_version.argtypes = []
    lib.fc_version.restype = ctypes.c_char_p
    lib.fc_kernel_id.argtypes = []
    lib.fc_kernel_id.restype = ctypes.c_char_p
    lib.fc_block_n_options.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int32), ctypes.c_int]
    lib.fc_block_n_options.restype = ctypes.c_int
    lib.fc_points.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int32), ctypes.c_int, ctypes.c_int]
    lib.fc_points.restype = ctypes.c_int
    lib.fc_append_kv.argtypes = [ctypes.POINTER(FcAppendParams), ctypes.c_void_p]
    lib.fc_append_kv.restype = ctypes.c_int
    return lib


def last_error(lib: ctypes.CDLL) -> str:
    raw = lib.fc_last_error()
    return raw.decode("utf-8", "replace") if raw else ""
