"""What an FP8 KV cache costs on the bf16 copy (flashcore/fp8_cache.py) against the FP8 kernel and against a bf16
cache: decode B16, Hq 32 / Hkv 8, D128, caches of CAP keys (default 8192, lengths 1K..CAP), one query each. Rows: the
FP8 cache on the FP8 kernel (no modifier), the FP8 cache with softcap (the copy path), a bf16 cache with softcap
(the 16-bit kernel), each the median of 5 rounds (serving_fa3.timeit). The copy path's time is the conversion of
both caches plus the 16-bit kernel's; its memory, twice the FP8 caches'.

    PYTHONPATH=.:bench python3 bench/fp8_cache_copy.py      # CAP=32768 for longer caches

Needs an SM 9.0 GPU and the built library.
"""

from __future__ import annotations

import os

import torch
from serving_fa3 import timeit

import flashcore

CAP = int(os.environ.get("CAP", "8192"))


def median(fn: object, rounds: int = 5) -> float:
    return sorted(timeit(fn) for _ in range(rounds))[rounds // 2]  # type: ignore[arg-type]


def main() -> None:
    torch.manual_seed(0)
    batch, hkv, hq, dim = 16, 8, 32, 128
    k16 = torch.randn(batch, CAP, hkv, dim, device="cuda", dtype=torch.bfloat16)
    v16 = torch.randn_like(k16)
    k8, v8 = k16.to(torch.float8_e4m3fn), v16.to(torch.float8_e4m3fn)
    q16 = torch.randn(batch, 1, hq, dim, device="cuda", dtype=torch.bfloat16)
    q8 = q16.to(torch.float8_e4m3fn)
    lengths = torch.randint(1024, CAP + 1, (batch,), generator=torch.Generator().manual_seed(1)).to(torch.int32).cuda()
    rows = {
        "fp8 cache, FP8 kernel": lambda: flashcore.flash_attn_with_kvcache(q8, k8, v8, cache_seqlens=lengths),
        "fp8 cache + softcap, bf16 copy": lambda: flashcore.flash_attn_with_kvcache(q8, k8, v8, cache_seqlens=lengths,
                                                                                    softcap=30.0),
        "bf16 cache + softcap, 16-bit kernel": lambda: flashcore.flash_attn_with_kvcache(q16, k16, v16,
                                                                                         cache_seqlens=lengths,
                                                                                         softcap=30.0),
    }
    print(f"B{batch} Hq{hq}/Hkv{hkv} D{dim} caches of {CAP} keys, {torch.cuda.get_device_name()}")
    base = None
    for name, fn in rows.items():
        ms = median(fn)
        base = base or ms
        print(f"{name:38s} {ms:8.3f} ms  {ms / base:6.2f}x the FP8 kernel", flush=True)


if __name__ == "__main__":
    main()
