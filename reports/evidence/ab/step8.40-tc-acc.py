"""Step 8.40: FP8 LSE and O errors against the fp32 reference of the dequantized inputs, for the library in
$FLASHCORE_LIB (and FA3's with --fa3), on fresh random inputs (a seed per shape). As run on the device (.ab/tc_acc.py),
reformatted for the linter afterwards."""

import sys

import torch

from flashcore import reference
from flashcore.fp8 import attention_fp8

E4M3 = torch.float8_e4m3fn
SHAPES = [  # batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, causal
    (2, 1024, 1024, 8, 8, 128, False),
    (2, 4096, 4096, 8, 8, 128, True),
    (2, 4096, 4096, 8, 8, 128, False),
    (1, 2048, 2048, 32, 8, 128, True),
    (2, 500, 224, 8, 8, 128, True),
    (2, 1, 8192, 32, 8, 128, False),
    (1, 4097, 4097, 4, 4, 128, False),
]


def errors(tag: str, name: str, out: torch.Tensor, lse: torch.Tensor, ref: torch.Tensor, ref_lse: torch.Tensor) -> None:
    le = (lse - ref_lse).abs()
    oe = (out.float() - ref).abs()
    bias = (lse - ref_lse).mean().item()
    print(
        f"{tag:5s} {name:36s} lse max {le.max().item():.2e} mean {le.mean().item():.2e} bias {bias:+.2e}"
        f"  O max {oe.max().item():.2e} mean {oe.mean().item():.2e}",
        flush=True,
    )


def main() -> None:
    fa3 = None
    if "--fa3" in sys.argv:
        from harness.bench.backends import import_fa3

        fa3, _, _ = import_fa3()
    tag = sys.argv[1]
    for i, (b, sq, sk, hq, hkv, d, causal) in enumerate(SHAPES):
        torch.manual_seed(100 + i)
        q = (torch.randn(b, sq, hq, d, device="cuda") * 1.5).to(E4M3)
        k = (torch.randn(b, sk, hkv, d, device="cuda") * 1.5).to(E4M3)
        v = torch.randn(b, sk, hkv, d, device="cuda").to(E4M3)
        ds = [torch.rand(b, hkv, device="cuda") * 1.5 + 0.25 for _ in range(3)]
        q32, k32, v32 = (reference.dequantize(x, s, hkv) for x, s in zip((q, k, v), ds, strict=False))
        ref, ref_lse = reference.dense(q32, k32, v32, causal=causal, scale=d**-0.5)
        name = f"B{b} Sq{sq} Sk{sk} H{hq}/{hkv} D{d}{' causal' if causal else ''}"
        out, lse = attention_fp8(q, k, v, q_descale=ds[0], k_descale=ds[1], v_descale=ds[2], causal=causal)
        errors(tag, name, out, lse, ref, ref_lse)
        if fa3 is not None:
            r = fa3(q, k, v, q_descale=ds[0], k_descale=ds[1], v_descale=ds[2], causal=causal, return_attn_probs=True)
            errors("FA3", name, r[0], r[1], ref, ref_lse)


if __name__ == "__main__":
    main()
