"""GPU timing: interleaved rounds of calls, CUDA events around each, L2 flushed before each, warm-up first.

One paired measurement (`time_rounds`) of several calls (the backends of a workload, or of every point of one
scaling sweep; harness/bench/paired.py says why):
1. Warm-up, per call: `warmup` calls, each after an L2 flush, timed with events (module load and cuDNN plan
   building stay out of the numbers; their median is the call's estimate); then untimed calls, interleaved
   across all the calls, until each has run `warmup_ms` of GPU time: clocks and power settle under the same
   mix of kernels the rounds will run.
2. NVML clocks and power are read (the start reading), then a GPU spin (`head_start_ms`) lets the host's
   launches get ahead of the GPU: no repetition then waits on the host's launch overhead.
3. `rounds` rounds (TimingParams.rounds_for: the GPU time the calls would get one after another), queued
   without any host synchronization. Round r runs each call once (twice when `mirrored`: forward, then
   backward), in `paired.round_order(r)`; each call is
   flush (write a `flush_mib` buffer, far above the 50 MB L2 of an H100) -> event -> clock probe (a fixed-cycle
   spin, `clock_probe_us`) -> event -> the call -> event. One synchronize at the end, then NVML again.
Per-repetition times are the events around the call, in milliseconds, GPU clock only; the probe's time gives the
SM clock right before the call (cycles / time). Each repetition keeps its round index, so pairs can be rebuilt
(paired.round_times sums a call's runs of one round).

Every benchmarked workload runs for milliseconds, so launch gaps are hidden by the queue; CUDA-graph replay
(for microsecond kernels) is not needed here. A call that raises is dropped from the following rounds and
reported with why; the others go on.

Test-only: `Noise` launches a matrix-product burst on a side stream alongside FlashCore's calls from the middle
of the rounds on (a neighbour's job that starts mid-measurement and contends with one backend's kernels): the
paired ratio's spread must catch it.
"""

from __future__ import annotations

import contextlib
import os
import statistics
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness.bench import paired
from harness.bench.settings import OURS, TimingParams
from harness.shard_plan import GPU_INDEX_ENV

if TYPE_CHECKING:
    import torch

DEFAULT_SM_MHZ = 1980  # H100 SXM max SM clock: converts milliseconds to torch.cuda._sleep cycles

Key = tuple[str, str]  # (workload, backend)


class L2Flusher:
    """Writes a buffer larger than L2 so no repetition finds the previous one's data in cache."""

    def __init__(self, mib: int, device: str = "cuda") -> None:
        import torch

        self.buffer = torch.empty(mib << 20, dtype=torch.uint8, device=device) if mib else None

    def __call__(self) -> None:
        if self.buffer is not None:
            self.buffer.zero_()


class Noise:
    """Test-only: side-stream matmul bursts overlapping FlashCore's calls in the second half of the rounds."""

    BURST_MATMUL_MS = 1.4  # about one 8192^3 bf16 product on an H100

    def __init__(self, device: str = "cuda", n: int = 8192) -> None:
        import torch

        self.stream = torch.cuda.Stream(device=device)
        g = torch.Generator(device=device).manual_seed(0)
        self.a = torch.randn(n, n, device=device, dtype=torch.bfloat16, generator=g)
        self.b = torch.randn(n, n, device=device, dtype=torch.bfloat16, generator=g)
        self.c = torch.empty_like(self.a)

    def __call__(self, r: int, rounds: int, key: Key, estimate_ms: float) -> None:
        import torch

        if key[1] != OURS or r < rounds // 2:
            return
        ready = torch.cuda.Event()
        ready.record()
        self.stream.wait_event(ready)  # the burst starts with this call, not ahead of it
        with torch.cuda.stream(self.stream):
            for _ in range(max(1, round(estimate_ms / self.BURST_MATMUL_MS))):
                torch.mm(self.a, self.b, out=self.c)


def sleep_cycles(ms: float) -> int:
    """torch.cuda._sleep cycles for about `ms` milliseconds at the SM clock."""
    return int(ms * 1000 * (max_sm_clock_mhz() or DEFAULT_SM_MHZ))


def _events(n: int) -> list[torch.cuda.Event]:
    import torch

    return [torch.cuda.Event(enable_timing=True) for _ in range(n)]


def _why(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}".rstrip(": ")


@dataclass
class Call:
    """One thing to time: `fn` runs inside `context()` (e.g. SDPA's backend selection)."""

    key: Key
    fn: Callable[[], object]
    context: Callable[[], AbstractContextManager[Any]] = field(default=contextlib.nullcontext)
    label: str = ""  # NVTX range name around each call


@dataclass
class Rounds:
    """What `time_rounds` measured, per call key."""

    rounds: int  # rounds queued
    times_ms: dict[Key, list[float]]
    round_index: dict[Key, list[int]]
    clock_mhz: dict[Key, list[float]]  # empty lists when the probe is off
    estimates_ms: dict[Key, float]
    crashed: dict[Key, str]  # calls that raised (warm-up or a round): why; their times are dropped
    clocks_start: dict[str, Any]
    clocks_end: dict[str, Any]


Before = Callable[[int, int, Key, float], None]  # (round, rounds, key, estimate_ms): test-only noise


def time_rounds(calls: Sequence[Call], p: TimingParams, flush: L2Flusher, before_call: Before | None = None,
                nvtx: Callable[[str], AbstractContextManager[Any]] | None = None) -> Rounds:
    """Warm-up, then interleaved rounds of `calls` (see the module docstring)."""
    import torch

    span = nvtx or (lambda name: contextlib.nullcontext())
    cycles_per_ms = 1000 * (max_sm_clock_mhz() or DEFAULT_SM_MHZ)  # torch.cuda._sleep counts SM cycles
    crashed: dict[Key, str] = {}
    estimates: dict[Key, float] = {}
    for c in calls:  # 1. warm-up, timed: the estimate of each call
        starts, ends = _events(p.warmup), _events(p.warmup)
        try:
            with span(c.label), c.context():
                for s, e in zip(starts, ends, strict=True):
                    flush()
                    s.record()
                    c.fn()
                    e.record()
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 - this call fails; the others are still timed
            crashed[c.key] = _why(e)
            continue
        estimates[c.key] = statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends, strict=True))
    live = [c for c in calls if c.key not in crashed]
    extra = {c.key: paired.warmup_calls(estimates[c.key], p.warmup, p.warmup_ms) for c in live}
    for i in range(max(extra.values(), default=0)):  # ... then untimed and interleaved: clocks settle
        for c in live:
            if i < extra[c.key] and c.key not in crashed:
                try:
                    with c.context():
                        flush()
                        c.fn()
                except Exception as e:  # noqa: BLE001
                    crashed[c.key] = _why(e)
    live = [c for c in live if c.key not in crashed]
    by_workload: dict[str, list[Call]] = {}
    for c in live:
        by_workload.setdefault(c.key[0], []).append(c)
    layout = list(by_workload.values())
    n_rounds = p.rounds_for([estimates[c.key] for c in live]) if live else 0
    probe = int(cycles_per_ms * p.clock_probe_us / 1000)
    queued: dict[Key, list[tuple[int, Any, Any, Any]]] = {c.key: [] for c in live}
    clocks_start = read_clocks()  # 2. while the warm-up still runs: the settled state
    if p.head_start_ms and live:
        torch.cuda._sleep(int(cycles_per_ms * p.head_start_ms))
    for r in range(n_rounds):  # 3. the rounds, queued without a host synchronization
        for c in paired.round_order(r, layout, p.mirrored):
            if c.key in crashed:
                continue
            flush()
            if before_call is not None:
                before_call(r, n_rounds, c.key, estimates[c.key])
            e0, e1, e2 = _events(3)
            try:
                with span(c.label), c.context():
                    if probe:
                        e0.record()
                        torch.cuda._sleep(probe)
                    e1.record()
                    c.fn()
                    e2.record()
            except Exception as e:  # noqa: BLE001
                crashed[c.key] = _why(e)
                continue
            queued[c.key].append((r, e0 if probe else None, e1, e2))
    torch.cuda.synchronize()
    clocks_end = read_clocks()
    times: dict[Key, list[float]] = {}
    index: dict[Key, list[int]] = {}
    clock: dict[Key, list[float]] = {}
    for key, items in queued.items():
        if key in crashed:
            continue
        times[key] = [e1.elapsed_time(e2) for _, _, e1, e2 in items]
        index[key] = [r for r, _, _, _ in items]
        # MHz = cycles per microsecond of the fixed-cycle spin
        clock[key] = [probe / (e0.elapsed_time(e1) * 1000) for _, e0, e1, _ in items] if probe else []
    return Rounds(n_rounds, times, index, clock, estimates, crashed, clocks_start, clocks_end)


def nvtx_span() -> Callable[[str], AbstractContextManager[Any]]:
    """A per-call NVTX range, chosen once (the rounds open one per call): nvtx's annotate in the flashcore
    domain, else torch's range, else nothing (a CPU-only torch)."""
    try:
        import nvtx

        return lambda name: nvtx.annotate(name, domain="flashcore")
    except ImportError:
        import torch

        return torch.cuda.nvtx.range if torch.cuda.is_available() else (lambda name: contextlib.nullcontext())


def time_gpu(fn: Callable[[], object], p: TimingParams, flush: L2Flusher) -> tuple[list[float], float]:
    """Per-repetition GPU times (ms) of `fn` timed alone (one call per round), and its warm-up estimate."""
    got = time_rounds([Call(("", ""), fn)], p, flush)
    if ("", "") in got.crashed:
        raise RuntimeError(got.crashed[("", "")])
    return got.times_ms[("", "")], got.estimates_ms[("", "")]


# ---- clocks and kernels ------------------------------------------------------------------------------


@contextlib.contextmanager
def _nvml() -> Iterator[Any]:
    import importlib

    pynvml: Any = importlib.import_module("pynvml")  # nvidia-ml-py (the harness extra); else nvidia-smi
    pynvml.nvmlInit()
    try:
        yield pynvml
    finally:
        pynvml.nvmlShutdown()


def _handle(nv: Any) -> Any:
    """The NVML handle of this process's GPU. NVML numbers GPUs physically, whatever CUDA_VISIBLE_DEVICES says: a
    worker of a run over several GPUs names its own (FLASHCORE_GPU_INDEX, an index or a UUID), so a perf part on
    GPU 1 records GPU 1's clocks and power, not GPU 0's; else the first GPU."""
    device = os.environ.get(GPU_INDEX_ENV, "")
    if device.isdigit():
        return nv.nvmlDeviceGetHandleByIndex(int(device))
    return nv.nvmlDeviceGetHandleByUUID(device) if device else nv.nvmlDeviceGetHandleByIndex(0)


def read_clocks() -> dict[str, Any]:
    """SM and memory clocks (MHz), temperature and power of this process's GPU, read now; from NVML, else
    nvidia-smi."""
    try:
        with _nvml() as nv:
            h = _handle(nv)
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
            return int(nv.nvmlDeviceGetMaxClockInfo(_handle(nv), nv.NVML_CLOCK_SM))
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
