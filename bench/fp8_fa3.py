"""FP8 (E4M3) prefill and decode side by side with FA3's FP8 (the fa3-fwd wheel), FlashCore bf16 and FA3 bf16 on the
same shapes, and the chip's FP8 and bf16 matmul rates (torch._scaled_mm and torch.matmul, 8192^3) as ceilings; all in
one process on one GPU, each pair timed in alternating rounds (bench/serving_fa3.py's timeit/paired). FlashCore's
FP8 time includes its V transpose, the way attention_fp8 picks it ("auto": the copy for these prefill shapes, the
shared-memory transpose for decode; flashcore.plan's v_transpose). Ratio = FA3 time / FlashCore time.

    PYTHONPATH=<fa3-fwd and nvtx wheels>:. python3 bench/fp8_fa3.py [--quick] [--fp8-only]   # $OUT/bench_fp8.json

--quick: S = 8K only; --fp8-only: the FP8 prefill and decode pairs only (an A/B of builds: FLASHCORE_LIB=<build>.so);
--dims=64,128: those head dims only (default 128 and 256; 64 runs only when named).

Needs an H100 and the fa3-fwd wheel (built with FP8).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serving_fa3 import fa3_module, paired, timeit  # noqa: E402

import flashcore  # noqa: E402
from flashcore.fp8 import attention_fp8  # noqa: E402

E4M3 = torch.float8_e4m3fn
ROWS: list[dict[str, object]] = []


def matmul_ceilings() -> tuple[float, float]:
    """(FP8 TFLOPS of torch._scaled_mm, bf16 TFLOPS of torch.matmul) at 8192^3."""
    n = 8192
    a = torch.randn(n, n, device="cuda").to(E4M3)
    b = torch.randn(n, n, device="cuda").to(E4M3).t()  # column-major B, as _scaled_mm wants
    one = torch.ones((), device="cuda")
    fp8_ms = timeit(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
    a16, b16 = torch.randn(n, n, device="cuda", dtype=torch.bfloat16), torch.randn(n, n, device="cuda",
                                                                                  dtype=torch.bfloat16)
    bf16_ms = timeit(lambda: a16 @ b16)
    flops = 2 * n ** 3
    return flops / fp8_ms / 1e9, flops / bf16_ms / 1e9


def prefill(fa3, batch: int, heads: int, seqlen: int, dim: int, causal: bool,  # type: ignore[no-untyped-def]
            bf16: bool = True) -> None:
    q, k, v = (torch.randn(batch, seqlen, heads, dim, device="cuda").to(E4M3) for _ in range(3))
    d = [torch.rand(batch, heads, device="cuda") + 0.5 for _ in range(3)]
    flops = 4 * batch * heads * seqlen * seqlen * dim / (2 if causal else 1)
    fc, fa = paired(lambda: attention_fp8(q, k, v, q_descale=d[0], k_descale=d[1], v_descale=d[2], causal=causal),
                    lambda: fa3.flash_attn_func(q, k, v, causal=causal, q_descale=d[0], k_descale=d[1],
                                                v_descale=d[2]))
    fc16 = fa16 = float("nan")
    if bf16:
        q16, k16, v16 = (x.to(torch.bfloat16) for x in (q, k, v))
        fc16, fa16 = paired(lambda: flashcore.attention(q16, k16, v16, causal=causal),
                            lambda: fa3.flash_attn_func(q16, k16, v16, causal=causal))
    name = f"B{batch} H{heads} S{seqlen} D{dim}{' causal' if causal else ''}"
    row = {"name": name, "fc_fp8_ms": fc, "fa3_fp8_ms": fa, "fc_bf16_ms": fc16, "fa3_bf16_ms": fa16,
           "fc_fp8_tflops": flops / fc / 1e9, "fa3_fp8_tflops": flops / fa / 1e9,
           "fc_bf16_tflops": flops / fc16 / 1e9, "fa3_bf16_tflops": flops / fa16 / 1e9, "ratio_fp8": fa / fc}
    ROWS.append(row)
    print(f"{name:28s} fp8 fc {row['fc_fp8_tflops']:6.0f} fa3 {row['fa3_fp8_tflops']:6.0f} TFLOPS "
          f"({fa / fc:.3f}x) | bf16 fc {row['fc_bf16_tflops']:6.0f} fa3 {row['fa3_bf16_tflops']:6.0f}", flush=True)


def decode(fa3, batch: int, heads_q: int, heads_kv: int, seqlen: int, dim: int) -> None:  # type: ignore[no-untyped-def]
    q = torch.randn(batch, 1, heads_q, dim, device="cuda").to(E4M3)
    k, v = (torch.randn(batch, seqlen, heads_kv, dim, device="cuda").to(E4M3) for _ in range(2))
    fc, fa = paired(lambda: attention_fp8(q, k, v), lambda: fa3.flash_attn_func(q, k, v, num_splits=0))
    name = f"decode B{batch} H{heads_q}/{heads_kv} S{seqlen} D{dim}"
    way = flashcore.plan(q, k, v).v_transpose
    ROWS.append({"name": name, "fc_fp8_ms": fc, "fa3_fp8_ms": fa, "ratio_fp8": fa / fc, "v_transpose": way})
    print(f"{name:28s} fp8 fc {fc:.3f} ms fa3 {fa:.3f} ms ({fa / fc:.3f}x) v_transpose {way}", flush=True)


def main() -> None:
    fa3 = fa3_module()
    quick, fp8_only = "--quick" in sys.argv, "--fp8-only" in sys.argv
    print(f"library {flashcore.library_path()}", flush=True)
    if not fp8_only:
        fp8_peak, bf16_peak = matmul_ceilings()
        print(f"matmul 8192^3: FP8 {fp8_peak:.0f} TFLOPS, bf16 {bf16_peak:.0f} TFLOPS", flush=True)
        ROWS.append({"name": "matmul 8192^3", "fp8_tflops": fp8_peak, "bf16_tflops": bf16_peak})
    dims = next((tuple(int(d) for d in a.split("=", 1)[1].split(",")) for a in sys.argv if a.startswith("--dims=")),
                (128, 256))
    shapes = [(4, 16, 8192, d) for d in dims] if quick else \
        [(4, 16, s, d) for d in dims for s in (4096, 8192)] + [(16, 16, 1024, d) for d in dims if d == 128]
    for batch, heads, seqlen, dim in shapes:
        for causal in (False, True):
            prefill(fa3, batch, heads, seqlen, dim, causal, bf16=not fp8_only)
    decode(fa3, 64, 32, 8, 8192, 128)
    decode(fa3, 16, 16, 16, 4096, 256)
    decode(fa3, 64, 32, 8, 8192, 64)
    suffix = "-" + Path(flashcore.library_path()).stem if fp8_only else ""
    out = Path(os.environ.get("OUT", ".")) / f"bench_fp8{suffix}.json"
    out.write_text(json.dumps({"rows": ROWS, "device": torch.cuda.get_device_name()}, indent=1))


if __name__ == "__main__":
    main()
