"""FlashCore: a Hopper (SM 9.0) FlashAttention forward kernel, called from PyTorch.

    out, lse = flashcore.attention(q, k, v, causal=True)

Layout: q [B, Sq, Hq, D], k and v [B, Sk, Hkv, D] (fp16 or bf16, last dim contiguous), out like q,
lse [B, Hq, Sq] float32; FP8 (E4M3) inputs with descale factors: flashcore.attention_fp8 (bf16 out).
See flashcore.attention's docstring for the full contract. FlashAttention-3's names:
flashcore.flash_attn_func, flashcore.flash_attn_varlen_func, flashcore.flash_attn_with_kvcache and
flashcore.flash_attn_combine (merges split-KV partials), flashcore.get_scheduler_metadata
(flashcore/flash_attn.py; the serving layouts in flashcore/serving.py).
"""

from flashcore._lib import library_path
from flashcore._version import __version__
from flashcore.api import Plan, attention, plan
from flashcore.device_errors import check_errors
from flashcore.errors import FlashCoreError, KernelLaunchError, UnsupportedArgument, UnsupportedDeviceError
from flashcore.flash_attn import flash_attn_combine, flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache
from flashcore.fp8 import attention_fp8
from flashcore.launch import compiled_points
from flashcore.points import Point
from flashcore.scheduler import get_scheduler_metadata
from flashcore.tuning import TileConfig, TuningWarning

__all__ = ["__version__", "attention", "attention_fp8", "plan", "Plan", "TileConfig", "Point", "compiled_points",
           "TuningWarning", "library_path", "FlashCoreError", "UnsupportedDeviceError", "KernelLaunchError",
           "flash_attn_func", "flash_attn_varlen_func", "flash_attn_with_kvcache", "flash_attn_combine",
           "get_scheduler_metadata", "UnsupportedArgument", "check_errors"]
