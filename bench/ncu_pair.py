"""One shape through a FlashCore build and FA3, for Nsight Compute to profile both kernels in one process.

    ncu --clock-control none --kernel-name regex:'attention_forward_wgmma|device_kernel' --launch-skip 2 \\
        --section WarpStateStats ... python3 bench/ncu_pair.py build/libflashcore.so d128

Each backend runs `--calls` times (default 3) on the same fresh random inputs (ab_kernels.SHAPES; `fp8-*` shapes take
E4M3 inputs and descales, ab_kernels.draw_inputs); skip the first launches of each with ncu's --launch-skip /
--launch-count as needed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ab_kernels import SHAPES, Build, draw_inputs, fa3_descales  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from harness.bench.backends import import_fa3  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("library")
    ap.add_argument("shape", choices=sorted(SHAPES))
    ap.add_argument("--calls", type=int, default=3)
    ap.add_argument("--no-fa3", action="store_true")
    args = ap.parse_args()
    b, hq, hkv, sq, sk, d, causal, dt = SHAPES[args.shape]
    q, k, v, descales = draw_inputs(SHAPES[args.shape])
    out = torch.empty(q.shape, device="cuda", dtype=torch.float16 if dt == "fp16" else torch.bfloat16)
    lse = torch.empty(b, hq, sq, device="cuda")
    fn, _ = Build("flashcore", args.library).prepare(q, k, v, out, lse, causal, descales)
    for _ in range(args.calls):
        fn()
    if not args.no_fa3:
        fa3, _, _ = import_fa3()
        for _ in range(args.calls):
            fa3(q, k, v, causal=causal, num_splits=0, **fa3_descales(descales))
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
