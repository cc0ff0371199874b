"""The chip's matmul rate, measured in the perf gate's run as the ceiling its attention TFLOPS are read against
(reported, never judged): torch._scaled_mm on E4M3 (per-tensor scales, bf16 out) or a bf16 torch.matmul, square n^3.
The median of `reps` CUDA-event-timed calls after a warm-up, as FA3's and the FP8 issue's ceiling figure."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

KINDS = ("fp8-matmul", "bf16-matmul")


@dataclass(frozen=True)
class Ceiling:
    kind: str
    n: int
    tflops: float
    what: str


def measure(kind: str, n: int, reps: int = 20, device: str = "cuda") -> Ceiling:
    import torch

    g = torch.Generator(device=device).manual_seed(n)
    a = torch.randn(n, n, generator=g, device=device)
    b = torch.randn(n, n, generator=g, device=device)
    if kind == "fp8-matmul":
        a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn).t()  # _scaled_mm: B column-major
        one = torch.ones((), device=device)

        def call() -> object:
            return torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        what = f"torch._scaled_mm e4m3 {n}^3, bf16 out"
    elif kind == "bf16-matmul":
        a16, b16 = a.bfloat16(), b.bfloat16()

        def call() -> object:
            return a16 @ b16
        what = f"torch.matmul bf16 {n}^3"
    else:
        raise ValueError(f"unknown ceiling {kind!r}: one of {', '.join(KINDS)}")
    for _ in range(3):
        call()
    times = []
    for _ in range(reps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return Ceiling(kind, n, 2.0 * n**3 / (statistics.median(times) * 1e-3) / 1e12, what)
