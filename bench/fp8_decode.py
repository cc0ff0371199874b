"""FP8 KV-cache decode on the FP8 kernel against the 16-bit kernel on the same caches: B16, Hq 32 / Hkv 8, D128,
caches of 8192 keys (lengths 1K..8K), one query each, from pages of 64 keys (index values checked on the device) and
from contiguous caches (FP8: checked on the host, a device sync per call). GPU time per call, serving_fa3.timeit.

    PYTHONPATH=.:bench python3 bench/fp8_decode.py

Needs an SM 9.0 GPU and the built library.
"""

from __future__ import annotations

import torch
from serving_fa3 import timeit

import flashcore


def main() -> None:
    torch.manual_seed(0)
    batch, cap, hkv, hq, dim, page = 16, 8192, 8, 32, 128, 64
    k16 = torch.randn(batch * cap // page, page, hkv, dim, device="cuda", dtype=torch.bfloat16)
    v16 = torch.randn_like(k16)
    k8, v8 = k16.to(torch.float8_e4m3fn), v16.to(torch.float8_e4m3fn)
    table = torch.randperm(batch * cap // page, device="cuda").to(torch.int32).view(batch, cap // page)
    q16 = torch.randn(batch, 1, hq, dim, device="cuda", dtype=torch.bfloat16)
    q8 = q16.to(torch.float8_e4m3fn)
    lengths = torch.randint(1024, cap + 1, (batch,), generator=torch.Generator().manual_seed(1)).to(torch.int32).cuda()
    whole = {name: t.view(batch, cap, hkv, dim) for name, t in (("k16", k16), ("v16", v16), ("k8", k8), ("v8", v8))}
    rows = {
        "bf16 paged 64": lambda: flashcore.flash_attn_with_kvcache(q16, k16, v16, cache_seqlens=lengths,
                                                                   page_table=table),
        "fp8 paged 64 (FP8 kernel)": lambda: flashcore.flash_attn_with_kvcache(q8, k8, v8, cache_seqlens=lengths,
                                                                               page_table=table),
        "bf16 contiguous": lambda: flashcore.flash_attn_with_kvcache(q16, whole["k16"], whole["v16"],
                                                                     cache_seqlens=lengths),
        "fp8 contiguous (FP8 kernel, host checks)": lambda: flashcore.flash_attn_with_kvcache(
            q8, whole["k8"], whole["v8"], cache_seqlens=lengths),
    }
    print(f"B{batch} Hq{hq}/Hkv{hkv} D{dim} caches of {cap} keys, {torch.cuda.get_device_name()}")
    for name, fn in rows.items():
        print(f"{name:42s} {timeit(fn):8.3f} ms", flush=True)


if __name__ == "__main__":
    main()
