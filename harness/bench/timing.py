"""GPU timing: CUDA events around each repetition, L2 flushed before each, warm-up first.

One measurement (`time_gpu`):
1. `warmup` calls, each after an L2 flush, timed with events: module load and cuDNN plan building stay out
   of the numbers, and their median sizes the loop (`TimingParams.reps_for`); then more calls until `warmup_ms`
   of GPU time has run, so the clocks and the power draw of a heavy kernel settle before the timed ones.
2. A GPU spin (`head_start_ms`) so the host's launches get ahead of the GPU: no repetition then waits on
   the host's launch overhead (FlashCore's Python-side checks, SDPA dispatch), which would be counted.
3. `reps` repetitions queued without any host synchronization: flush (write a `flush_mib` buffer, far above
   the 50 MB L2 of an H100) -> start event -> the call -> end event. One synchronize at the end.
Per-repetition times are `start.elapsed_time(end)`, in milliseconds, GPU clock only.

Every benchmarked workload runs for milliseconds, so launch gaps are hidden by the queue; CUDA-graph replay
(for microsecond kernels) is not needed here.

Test-only: `Noise` launches a matrix-product burst on a side stream at every other repetition, so the
spread limit can be shown to catch a noisy run.
"""

from __future__ import annotations

import contextlib
import math
import statistics
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from harness.bench.settings import TimingParams

if TYPE_CHECKING:
    import torch

DEFAULT_SM_MHZ = 1980  # H100 SXM max SM clock: converts milliseconds to torch.cuda._sleep cycles


class L2Flusher:
    """Writes a buffer larger than L2 so no repetition finds the previous one's data in cache."""

    def __init__(self, mib: int, device: str = "cuda") -> None:
        import torch

        self.buffer = torch.empty(mib << 20, dtype=torch.uint8, device=device) if mib else None

    def __call__(self) -> None:
        if self.buffer is not None:
            self.buffer.zero_()


class Noise:
    """Test-only: a side-stream matmul burst at every other repetition, overlapping the timed call."""

    BURST_MATMUL_MS = 1.4  # about one 8192^3 bf16 product on an H100

    def __init__(self, device: str = "cuda", n: int = 8192) -> None:
        import torch

        self.stream = torch.cuda.Stream(device=device)
        g = torch.Generator(device=device).manual_seed(0)
        self.a = torch.randn(n, n, device=device, dtype=torch.bfloat16, generator=g)
        self.b = torch.randn(n, n, device=device, dtype=torch.bfloat16, generator=g)
        self.c = torch.empty_like(self.a)

    def __call__(self, rep: int, estimate_ms: float) -> None:
        import torch

        if rep % 2:
            return
        ready = torch.cuda.Event()
        ready.record()
        self.stream.wait_event(ready)  # the burst starts with this repetition, not ahead of it
        with torch.cuda.stream(self.stream):
            for _ in range(max(1, round(estimate_ms / self.BURST_MATMUL_MS))):
                torch.mm(self.a, self.b, out=self.c)


def sleep_cycles(ms: float) -> int:
    """torch.cuda._sleep cycles for about `ms` milliseconds at the SM clock."""
    return int(ms * 1000 * (max_sm_clock_mhz() or DEFAULT_SM_MHZ))


def _events(n: int) -> list[torch.cuda.Event]:
    import torch

    return [torch.cuda.Event(enable_timing=True) for _ in range(n)]


def time_gpu(fn: Callable[[], object], p: TimingParams, flush: L2Flusher,
             before_rep: Callable[[int, float], None] | None = None) -> tuple[list[float], float]:
    """Per-repetition GPU times (ms) of `fn`, and the warm-up estimate that sized the loop."""
    import torch

    starts, ends = _events(p.warmup), _events(p.warmup)
    for s, e in zip(starts, ends, strict=True):
        flush()
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    estimate = statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends, strict=True))
    for _ in range(max(0, math.ceil(p.warmup_ms / max(estimate, 1e-3)) - p.warmup)):
        flush()
        fn()
    reps = p.reps_for(estimate)
    starts, ends = _events(reps), _events(reps)
    if p.head_start_ms:
        torch.cuda._sleep(sleep_cycles(p.head_start_ms))
    for i in range(reps):
        flush()
        if before_rep is not None:
            before_rep(i, estimate)
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)], estimate


# ---- clocks and kernels ------------------------------------------------------------------------------


@contextlib.contextmanager
def _nvml() -> Iterator[Any]:
    import importlib

    pynvml: Any = importlib.import_module("pynvml")  # nvidia-ml-py; optional (nvidia-smi is the fallback)
    pynvml.nvmlInit()
    try:
        yield pynvml
    finally:
        pynvml.nvmlShutdown()


def read_clocks() -> dict[str, Any]:
    """SM and memory clocks (MHz), temperature and power of GPU 0, read now; from NVML, else nvidia-smi."""
    try:
        with _nvml() as nv:
            h = nv.nvmlDeviceGetHandleByIndex(0)
            return {
                "sm_mhz": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
                "mem_mhz": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM),
                "sm_max_mhz": nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM),
                "temp_c": nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
                "power_w": round(nv.nvmlDeviceGetPowerUsage(h) / 1000, 1),
                "source": "nvml",
            }
    except Exception:  # noqa: BLE001 - NVML missing or refused: fall back to nvidia-smi
        from harness.env import nvidia_smi

        smi = nvidia_smi()
        return {"sm_mhz": smi["sm_clock_mhz"], "mem_mhz": smi["mem_clock_mhz"],
                "sm_max_mhz": smi["sm_clock_max_mhz"], "source": "nvidia-smi" if smi["driver"] else "none"}


def max_sm_clock_mhz() -> int | None:
    try:
        with _nvml() as nv:
            return int(nv.nvmlDeviceGetMaxClockInfo(nv.nvmlDeviceGetHandleByIndex(0), nv.NVML_CLOCK_SM))
    except Exception:  # noqa: BLE001 - best effort
        return None


def kernel_names(fn: Callable[[], object], limit: int = 6) -> tuple[str, ...]:
    """Names of the GPU kernels one call of `fn` launches (torch profiler); () when the profiler fails."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    except Exception:  # noqa: BLE001 - evidence only; never fails a measurement
        return ()
    unique = list(dict.fromkeys(n for n in names if n))
    return tuple(n if len(n) <= 160 else n[:157] + "..." for n in unique[:limit])
