"""The serving workloads side by side with FA3 (the fa3-fwd wheel), paired in one process on one GPU: dense prefill
(the regression check of the serving changes), a sliding window (FlashCore only: fa3-fwd has no local attention),
softcap, varlen prefill of 9 causal sequences of 1K-16K (65536 tokens), decode with per-sequence cache lengths 1K-8K
(with and without cache_batch_idx), the same decode from a paged cache (pages of 1, 16, 64 and 256 keys; fa3-fwd has
no paged KV, so the pair is FA3 on the contiguous cache), and head dims 96, 192 and 192 with a v of 128 (FlashCore
runs them on its 128 and 256 kernels), and the newer FA3 arguments on the kernel (`new_paths`: an append with
rotary, a left-padded cache, packed queries into a cache, chunked attention; each against FA3's same call where
fa3-fwd takes it, else FlashCore alone with the reason), and FP8 on the varlen batch and the decode. Each figure is
the median over 5 rounds of the median of 15 repetitions of the mean time of INNER (default 10) back-to-back calls,
so a call's host time hides behind the GPU work as in a serving loop (INNER=1 exposes it). Ratio = FA3 time /
FlashCore time.

    PYTHONPATH=<fa3-fwd and nvtx wheels>:. python3 bench/serving_fa3.py        # writes $OUT/bench_serving.json

Needs a Hopper GPU and the fa3-fwd wheel (its interface imports `flash_attn_config`, aliased here to fa3_fwd_config).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable

import torch

import flashcore

INNER = int(os.environ.get("INNER", "10"))
ROWS: list[dict[str, float | str]] = []


def fa3_module():  # type: ignore[no-untyped-def]
    sys.modules.setdefault("flash_attn_config", __import__("fa3_fwd_config"))
    import fa3_fwd_interface

    return fa3_fwd_interface


def timeit(fn: Callable[[], object], reps: int = 15) -> float:
    """Median over reps of the mean GPU time (ms) of INNER back-to-back calls."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(INNER):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / INNER)
    return sorted(times)[len(times) // 2]


def paired(fc: Callable[[], object], fa: Callable[[], object], rounds: int = 5) -> tuple[float, float]:
    pairs = [(timeit(fc), timeit(fa)) for _ in range(rounds)]
    return sorted(a for a, _ in pairs)[rounds // 2], sorted(b for _, b in pairs)[rounds // 2]


def record(name: str, fc_ms: float, fa_ms: float) -> None:
    ROWS.append({"name": name, "fc_ms": fc_ms, "fa3_ms": fa_ms, "ratio": fa_ms / fc_ms})
    print(f"{name:48s} fc {fc_ms:8.3f} ms  fa3 {fa_ms:8.3f} ms  fa3/fc {fa_ms / fc_ms:6.3f}", flush=True)


def dense(fa3, batch: int, heads: int, seqlen: int, dim: int, causal: bool) -> None:  # type: ignore[no-untyped-def]
    q, k, v = (torch.randn(batch, seqlen, heads, dim, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    record(f"dense B{batch} H{heads} S{seqlen} D{dim} causal={causal}",
           *paired(lambda: flashcore.attention(q, k, v, causal=causal),
                   lambda: fa3.flash_attn_func(q, k, v, causal=causal)))


def main() -> None:
    fa3 = fa3_module()
    bf = torch.bfloat16
    torch.manual_seed(0)
    for shape in [(4, 16, 8192, 128, False), (4, 16, 8192, 128, True), (4, 16, 8192, 64, True),
                  (4, 16, 8192, 256, True), (16, 16, 1024, 128, True)]:
        dense(fa3, *shape)
    q, k, v = (torch.randn(4, 8192, 16, 128, device="cuda", dtype=bf) for _ in range(3))
    windowed = timeit(lambda: flashcore.flash_attn_func(q, k, v, causal=True, window_size=(1024, 0)))
    full = timeit(lambda: flashcore.attention(q, k, v, causal=True))
    print(f"dense S8K D128 window (1024,0) fc {windowed:.3f} ms (fa3-fwd has no local attention); causal full: "
          f"{full:.3f} ms", flush=True)
    record("dense S8K D128 causal softcap 30",
           *paired(lambda: flashcore.flash_attn_func(q, k, v, causal=True, softcap=30.0),
                   lambda: fa3.flash_attn_func(q, k, v, causal=True, softcap=30.0)))
    lens = [16384, 12288, 9216, 8192, 6144, 5120, 4096, 3072, 1024]
    lens[-1] += 65536 - sum(lens)
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    total = sum(lens)
    q = torch.randn(total, 32, 128, device="cuda", dtype=bf)
    k, v = torch.randn(total, 8, 128, device="cuda", dtype=bf), torch.randn(total, 8, 128, device="cuda", dtype=bf)
    record(f"varlen causal {len(lens)} seqs {total} tok H32/8 D128",
           *paired(lambda: flashcore.flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens), causal=True),
                   lambda: fa3.flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens), causal=True)))
    batch, capacity = 64, 8192
    k_cache = torch.randn(batch, capacity, 8, 128, device="cuda", dtype=bf)
    v_cache = torch.randn_like(k_cache)
    q = torch.randn(batch, 1, 32, 128, device="cuda", dtype=bf)
    lengths = torch.randint(1024, 8193, (batch,), generator=torch.Generator().manual_seed(1)).to(torch.int32).cuda()
    record("decode B64 per-seq 1K-8K H32/8 D128",
           *paired(lambda: flashcore.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths),
                   lambda: fa3.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths)))
    slots = torch.randperm(batch).to(torch.int32).cuda()
    record("decode B64 per-seq + cache_batch_idx",
           *paired(lambda: flashcore.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths,
                                                             cache_batch_idx=slots),
                   lambda: fa3.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths,
                                                       cache_batch_idx=slots)))
    paged_decode(fa3, q, k_cache, v_cache, lengths)
    for dim, dim_v in ((96, 96), (192, 192), (192, 128)):
        head_dims(fa3, dim, dim_v)
    new_paths(fa3)
    fp8_paths(fa3, cu, lens, lengths)
    out = os.environ.get("OUT", ".")
    with open(f"{out}/bench_serving.json", "w") as f:
        json.dump(ROWS, f, indent=1)


def head_dims(fa3, dim: int, dim_v: int) -> None:  # type: ignore[no-untyped-def]
    q, k = (torch.randn(4, 8192, 16, dim, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    v = torch.randn(4, 8192, 16, dim_v, device="cuda", dtype=torch.bfloat16)
    try:
        record(f"dense B4 H16 S8K D{dim}/{dim_v} causal",
               *paired(lambda: flashcore.attention(q, k, v, causal=True),
                       lambda: fa3.flash_attn_func(q, k, v, causal=True)))
    except RuntimeError as e:  # a head dim the wheel was not built for
        fc_ms = timeit(lambda: flashcore.attention(q, k, v, causal=True))
        print(f"dense B4 H16 S8K D{dim}/{dim_v} causal: fc {fc_ms:.3f} ms; fa3-fwd: {e}", flush=True)


def pair_or_alone(name: str, fc: Callable[[], object], fa: Callable[[], object]) -> None:
    """The pair, or FlashCore alone where fa3-fwd refuses the call (its error printed)."""
    try:
        fa()
    except (RuntimeError, TypeError, ValueError) as e:
        print(f"{name:48s} fc {timeit(fc):8.3f} ms  (fa3-fwd: {str(e).splitlines()[0][:80]})", flush=True)
        return
    record(name, *paired(fc, fa))


def new_paths(fa3) -> None:  # type: ignore[no-untyped-def]
    """FA3's newer arguments as serving engines call them: decode B64 with caches of 1K-8K keys (H32/8, D128)."""
    bf, batch, capacity = torch.bfloat16, 64, 8192
    gen = torch.Generator().manual_seed(2)
    k_cache = torch.randn(batch, capacity, 8, 128, device="cuda", dtype=bf)
    v_cache = torch.randn_like(k_cache)
    lengths = torch.randint(1024, 8000, (batch,), generator=gen).to(torch.int32).cuda()
    q = torch.randn(batch, 1, 32, 128, device="cuda", dtype=bf)
    k_new, v_new = (torch.randn(batch, 1, 8, 128, device="cuda", dtype=bf) for _ in range(2))
    angles = torch.rand(capacity, 32, device="cuda") * 6.28
    cos, sin = angles.cos().to(bf), angles.sin().to(bf)
    # each side appends at the same lengths (the cache rows written are the same every call)
    pair_or_alone("decode B64 append 1 + rotary (interleaved)",
                  lambda: flashcore.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, rotary_cos=cos,
                                                            rotary_sin=sin, cache_seqlens=lengths, causal=True),
                  lambda: fa3.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, rotary_cos=cos,
                                                      rotary_sin=sin, cache_seqlens=lengths, causal=True))
    leftpad = torch.randint(0, 512, (batch,), generator=gen).to(torch.int32).cuda()
    pair_or_alone("decode B64 cache_leftpad 0-511",
                  lambda: flashcore.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths,
                                                            cache_leftpad=leftpad),
                  lambda: fa3.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths,
                                                      cache_leftpad=leftpad))
    rows = 4  # speculative decoding: 4 query rows per sequence, packed
    qp = torch.randn(batch * rows, 32, 128, device="cuda", dtype=bf)
    cu_q = torch.arange(0, batch * rows + 1, rows, dtype=torch.int32, device="cuda")
    pair_or_alone("decode B64 x 4 packed queries (cu_seqlens_q) causal",
                  lambda: flashcore.flash_attn_with_kvcache(qp, k_cache, v_cache, cache_seqlens=lengths,
                                                            cu_seqlens_q=cu_q, max_seqlen_q=rows, causal=True),
                  lambda: fa3.flash_attn_with_kvcache(qp, k_cache, v_cache, cache_seqlens=lengths,
                                                      cu_seqlens_q=cu_q, max_seqlen_q=rows, causal=True))
    q8, k8, v8 = (torch.randn(2, 8192, 32 if i == 0 else 8, 128, device="cuda", dtype=bf) for i in range(3))
    pair_or_alone("prefill B2 S8K H32/8 causal attention_chunk 2048",
                  lambda: flashcore.flash_attn_func(q8, k8, v8, causal=True, attention_chunk=2048),
                  lambda: fa3.flash_attn_func(q8, k8, v8, causal=True, attention_chunk=2048))


def fp8_paths(fa3, cu: torch.Tensor, lens: list[int], lengths: torch.Tensor) -> None:  # type: ignore[no-untyped-def]
    """FP8 (E4M3, FA3's [B, Hkv] descales) on the packed batch and the per-sequence decode above (H32/8, D128), and
    that decode from pages of 64 keys against FA3 on the contiguous cache (fa3-fwd has no paged KV)."""
    e4m3, total, batch = torch.float8_e4m3fn, sum(lens), lengths.shape[0]
    q, k, v = (torch.randn(total, h, 128, device="cuda").to(e4m3) for h in (32, 8, 8))
    ds = {name: torch.rand(len(lens), 8, device="cuda") + 0.5 for name in ("q_descale", "k_descale", "v_descale")}
    pair_or_alone(f"fp8 varlen causal {len(lens)} seqs {total} tok H32/8 D128",
                  lambda: flashcore.flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens), causal=True, **ds),
                  lambda: fa3.flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens), causal=True, **ds))
    k_cache, v_cache = (torch.randn(batch, 8192, 8, 128, device="cuda").to(e4m3) for _ in range(2))
    qd = torch.randn(batch, 1, 32, 128, device="cuda").to(e4m3)
    dd = {name: torch.rand(batch, 8, device="cuda") + 0.5 for name in ("q_descale", "k_descale", "v_descale")}
    pair_or_alone(f"fp8 decode B{batch} per-seq 1K-8K H32/8 D128",
                  lambda: flashcore.flash_attn_with_kvcache(qd, k_cache, v_cache, cache_seqlens=lengths, **dd),
                  lambda: fa3.flash_attn_with_kvcache(qd, k_cache, v_cache, cache_seqlens=lengths, **dd))
    k_pages, v_pages, table = to_pages(k_cache.view(torch.uint8), v_cache.view(torch.uint8), 64)  # bytes: index_put
    k_pages, v_pages = k_pages.view(e4m3), v_pages.view(e4m3)
    record(f"fp8 decode B{batch} paged 64 (fa3 contiguous)",
           *paired(lambda: flashcore.flash_attn_with_kvcache(qd, k_pages, v_pages, cache_seqlens=lengths,
                                                             page_table=table, **dd),
                   lambda: fa3.flash_attn_with_kvcache(qd, k_cache, v_cache, cache_seqlens=lengths, **dd)))


def to_pages(k_cache: torch.Tensor, v_cache: torch.Tensor,
             page_size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Caches [B, capacity, H, D] (capacity a multiple of page_size) copied into pages in a shuffled order: (k
    pages, v pages, page_table [B, capacity / page_size])."""
    batch, capacity, heads, dim = k_cache.shape
    per = capacity // page_size
    order = torch.randperm(batch * per, device="cuda").to(torch.int32)
    k_pages = torch.empty(batch * per, page_size, heads, dim, device="cuda", dtype=k_cache.dtype)
    v_pages = torch.empty_like(k_pages)
    k_pages[order.long()] = k_cache.reshape(batch * per, page_size, heads, dim)
    v_pages[order.long()] = v_cache.reshape(batch * per, page_size, heads, dim)
    return k_pages, v_pages, order.view(batch, per)


def paged_decode(fa3, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,  # type: ignore[no-untyped-def]
                 lengths: torch.Tensor) -> None:
    """The per-sequence decode from pages (shuffled page ids), against FA3 on the contiguous cache; the bandwidth
    is the K/V bytes the sequences use over the FlashCore time."""
    _, _, heads, dim = k_cache.shape
    used = int(lengths.sum()) * heads * dim * 2 * 2
    for page_size in (1, 16, 64, 256):
        k_pages, v_pages, table = to_pages(k_cache, v_cache, page_size)
        fc_ms, fa_ms = paired(lambda kp=k_pages, vp=v_pages, t=table: flashcore.flash_attn_with_kvcache(
                                  q, kp, vp, cache_seqlens=lengths, page_table=t),
                              lambda: fa3.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths))
        record(f"decode paged {page_size} (fa3 contiguous)", fc_ms, fa_ms)
        print(f"    paged {page_size}: {used / fc_ms / 1e6:.0f} GB/s of K/V", flush=True)
        del k_pages, v_pages


if __name__ == "__main__":
    main()
