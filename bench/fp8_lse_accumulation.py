"""FP8 LSE error of FlashCore and FA3 side by side, against the fp32 reference on the dequantized inputs.

    python3 bench/fp8_lse_accumulation.py

Shapes with few keys per row, where the LSE is about one score: its error is then the error of the FP8 tensor-core
accumulation of q.k, which keeps fewer bits than float32. Prints, per shape, max |lse - lse_ref| for both backends
and M = softmax_scale x max over a row's keys of sum_d |q_d k_d|, the magnitude that error scales with
(tests/test_random_shapes_gpu.py FP8_SCORE_BITS bounds it). Needs an H100 and FA3 (harness/bench/backends.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from flashcore import reference  # noqa: E402
from flashcore.fp8 import attention_fp8  # noqa: E402
from harness.bench.backends import import_fa3  # noqa: E402
from harness.support.random_judge import score_magnitude  # noqa: E402

E4M3 = torch.float8_e4m3fn
# (batch, seqlen q, seqlen k, heads q, heads kv, head dim)
SHAPES = [(2, 4772, 1, 64, 8, 256), (2, 2048, 1, 16, 16, 256), (2, 2048, 16, 16, 16, 256), (2, 2048, 1, 16, 16, 128),
          (2, 2048, 1, 16, 16, 64), (2, 2048, 300, 16, 16, 256)]


def main() -> None:
    fa3, _, _ = import_fa3()
    print(f"{'shape':34s} {'FC lse err':>11s} {'FA3 lse err':>11s} {'max|lse|':>9s} {'M':>7s}")
    for b, sq, sk, hq, hkv, d in SHAPES:
        q = torch.randn(b, sq, hq, d, device="cuda").to(E4M3)
        k = torch.randn(b, sk, hkv, d, device="cuda").to(E4M3)
        v = torch.randn(b, sk, hkv, d, device="cuda").to(E4M3)
        ds = [torch.rand(b, hkv, device="cuda") * 1.5 + 0.25 for _ in range(3)]
        _, lse = attention_fp8(q, k, v, q_descale=ds[0], k_descale=ds[1], v_descale=ds[2])
        fa3_lse = fa3(q, k, v, q_descale=ds[0], k_descale=ds[1], v_descale=ds[2], return_attn_probs=True)[1]
        q32, k32, v32 = (reference.dequantize(x, s, hkv) for x, s in zip((q, k, v), ds, strict=True))
        _, ref_lse = reference.dense(q32, k32, v32, causal=False, scale=d ** -0.5)
        m = score_magnitude(q32, k32, d ** -0.5).amax().item()
        print(f"B{b} Sq{sq} Sk{sk} H{hq}/{hkv} D{d}".ljust(34), f"{(lse - ref_lse).abs().max().item():11.2e}",
              f"{(fa3_lse - ref_lse).abs().max().item():11.2e}", f"{ref_lse.abs().max().item():9.3f}", f"{m:7.2f}")


if __name__ == "__main__":
    main()
