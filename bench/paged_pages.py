"""Paged decode against the contiguous cache, FlashCore only (no FA3 wheel): the per-sequence decode of
bench/serving_fa3.py (B64, H32/8, D128, cache lengths 1K-8K, bf16) from a contiguous cache and from pages of PAGES
keys (default 1, 16, 64) in a shuffled order. Each pair is timed in the same rounds (serving_fa3.paired); ratio =
contiguous time / paged time (1.0: the pages cost nothing), GB/s = the K/V bytes the sequences use over the paged
time.

    PYTHONPATH=. python3 bench/paged_pages.py            # PAGES=1,2,3,16,64 INNER=1 to vary

Needs an SM 9.0 GPU and the built library.
"""

from __future__ import annotations

import os

import torch
from serving_fa3 import paired, to_pages

import flashcore

PAGES = [int(x) for x in os.environ.get("PAGES", "1,16,64").split(",")]


def main() -> None:
    torch.manual_seed(0)
    bf = torch.bfloat16
    batch, capacity, heads, dim = 64, 8192, 8, 128
    k_cache = torch.randn(batch, capacity, heads, dim, device="cuda", dtype=bf)
    v_cache = torch.randn_like(k_cache)
    q = torch.randn(batch, 1, 32, dim, device="cuda", dtype=bf)
    lengths = torch.randint(1024, capacity + 1, (batch,), generator=torch.Generator().manual_seed(1))
    lengths = lengths.to(torch.int32).cuda()
    used = int(lengths.sum()) * heads * dim * 2 * 2

    def contiguous() -> object:
        return flashcore.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths)

    want = contiguous()
    print(f"{'cache':>12} {'ms':>8} {'contig ms':>9} {'ratio':>6} {'GB/s':>6}", flush=True)
    for page_size in PAGES:
        if capacity % page_size:
            print(f"page {page_size}: skipped, it does not divide the capacity {capacity}")
            continue
        k_pages, v_pages, table = to_pages(k_cache, v_cache, page_size)

        def paged(kp: torch.Tensor = k_pages, vp: torch.Tensor = v_pages, t: torch.Tensor = table) -> object:
            return flashcore.flash_attn_with_kvcache(q, kp, vp, cache_seqlens=lengths, page_table=t)

        got = paged()
        assert isinstance(got, torch.Tensor) and isinstance(want, torch.Tensor)
        torch.testing.assert_close(got, want, atol=1e-2, rtol=1e-2)  # the same keys: the same result
        paged_ms, contig_ms = paired(paged, contiguous)
        print(f"{'page ' + str(page_size):>12} {paged_ms:8.4f} {contig_ms:9.4f} {contig_ms / paged_ms:6.3f} "
              f"{used / paged_ms / 1e6:6.0f}", flush=True)
        del k_pages, v_pages, table


if __name__ == "__main__":
    main()
