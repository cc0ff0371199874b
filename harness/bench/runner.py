"""Measure (workload, backend) pairs: inputs, probe, timed loop, clocks -> `Measurement`.

One `Measurer` per run: it keeps the L2 flush buffer, the current workload's inputs (every backend of a
workload times the same tensors: same seed, same data) and a cache, so the perf gates of one run (phase 4
runs perf-fa2 and perf-cudnn) and the scaling gate time each pair once and report the same numbers.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.bench import backends, timing
from harness.bench.record import Measurement, not_available
from harness.bench.settings import TimingParams
from harness.config import Workload
from harness.gates import gpu

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Options:
    timing: TimingParams
    base_seed: int
    fault: int = 0  # test-only kernel fault for FlashCore (SLOW_FAULT = the planted slow path)
    noisy: bool = False  # test-only: side-stream matmul bursts during the timed loop
    device: str = "cuda"


class Measurer:
    def __init__(self, options: Options) -> None:
        self.options = options
        self._flush: timing.L2Flusher | None = None
        self._noise: timing.Noise | None = None
        self._inputs: tuple[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] | None = None
        self._cache: dict[tuple[str, str], Measurement] = {}
        self.elapsed_s = 0.0

    def seed(self, wl: Workload) -> int:
        return gpu.workload_seed(self.options.base_seed, "bench", wl.name)

    def inputs(self, wl: Workload) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Fresh random q, k, v for this workload (kept while its backends are timed)."""
        if self._inputs is None or self._inputs[0] != wl.name:
            self._inputs = None
            gpu.free_memory()
            self._inputs = (wl.name, gpu.make_inputs(wl, self.seed(wl), self.options.device))
        return self._inputs[1]

    def measure(self, wl: Workload, backend: str) -> Measurement:
        """`prepare` then `time`, once per (workload, backend): later calls return the first result."""
        key = (wl.name, backend)
        if key not in self._cache:
            got = self.prepare(wl, backend)
            self._cache[key] = got if isinstance(got, Measurement) else self.time(wl, backend, got)
        return self._cache[key]

    def prepare(self, wl: Workload, backend: str) -> backends.Prepared | Measurement:
        """A probed, ready call on this workload's inputs, or the "not available" Measurement saying why."""
        q, k, v = self.inputs(wl)
        try:
            prepared = backends.prepare(backend, wl, q, k, v, self.options.fault if backend == "flashcore" else 0)
            backends.probe(prepared)
        except backends.Unavailable as e:
            return not_available(wl, backend, str(e), self.seed(wl))
        return prepared

    def time(self, wl: Workload, backend: str, prepared: backends.Prepared) -> Measurement:
        """The timed loop (harness/bench/timing.py) of a prepared call, with the clocks read right after."""
        opts = self.options
        t0 = time.monotonic()
        if self._flush is None:
            self._flush = timing.L2Flusher(opts.timing.flush_mib, opts.device)
        before: Callable[[int, float], None] | None = None
        planted = prepared.planted
        if opts.noisy:
            self._noise = self._noise or timing.Noise(opts.device)
            before = self._noise
            planted = ", ".join(p for p in (planted, "noise: side-stream matmul bursts") if p)
        with gpu.nvtx_range(f"bench/{wl.name}/{backend}"), prepared.context():
            kernels = timing.kernel_names(prepared.fn) if opts.timing.record_kernels else ()
            times, _ = timing.time_gpu(prepared.fn, opts.timing, self._flush, before)
        clocks: dict[str, Any] = timing.read_clocks()
        m = Measurement(wl.name, backend, wl, available=True, times_ms=tuple(times), seed=self.seed(wl),
                        clocks=clocks, implementation=prepared.implementation, kernels=kernels, planted=planted,
                        spread_groups=opts.timing.spread_groups)
        self._cache[(wl.name, backend)] = m
        self.elapsed_s += time.monotonic() - t0
        return m

    def release(self) -> None:
        """Drop the inputs and buffers (the cache of results stays)."""
        self._inputs = self._flush = self._noise = None
        gpu.free_memory()


_SHARED: dict[tuple[Path, Options], Measurer] = {}


def shared(run_dir: Path, options: Options) -> Measurer:
    """The Measurer of this run directory and options: gates of one run share measurements."""
    key = (Path(run_dir).resolve(), options)
    if key not in _SHARED:
        for other in _SHARED.values():
            other.release()  # one run at a time holds GPU buffers
        _SHARED[key] = Measurer(options)
    return _SHARED[key]
