"""Measure groups of (workload, backend) pairs in interleaved rounds: inputs, probe, rounds, clocks -> `Measurement`s.

One `Measurer` per run: it keeps the L2 flush buffer, the inputs of the group being timed (every backend of a
workload times the same tensors: same seed, same data) and a cache, so the perf gates of one run (phase 4
runs perf-fa2 and perf-cudnn) and the scaling gate time each group once and report the same numbers.

A group (BenchSettings.pairing_groups) is one workload, or the points of one scaling sweep; all its backends
and workloads are timed in the same rounds (harness/bench/timing.py) and share a `pairing` id, so any two of its
measurements form per-round pairs (harness/bench/paired.py).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.bench import backends, extend, timing
from harness.bench.record import CRASHED, Measurement, not_available
from harness.bench.selection import UNTIMED
from harness.bench.settings import TimingParams
from harness.schema import Workload
from harness.support import gpu, serving

Key = tuple[str, str]


@dataclass(frozen=True)
class Options:
    timing: TimingParams
    base_seed: int
    fault: int = 0  # test-only kernel fault for FlashCore (SLOW_FAULT = the planted slow path)
    noisy: bool = False  # test-only: side-stream matmul bursts alongside FlashCore's calls
    device: str = "cuda"
    # (workload, backend) pairs left untimed, each "not available" with selection.UNTIMED (harness/bench/selection.py)
    untimed: frozenset[tuple[str, str]] = frozenset()
    # the judged ratios that decide which workloads get extension rounds (harness/bench/extend.py; from every gate
    # of the configuration: selection.watches); None: no check named (make bench, a stored run), every workload
    # gets the cap's rounds
    watches: tuple[extend.Watch, ...] | None = None


def pairing_id(group: Sequence[Workload]) -> str:
    """The id shared by the measurements of one group's rounds (unique per group within a run)."""
    return "+".join(w.name for w in group)


class Measurer:
    def __init__(self, options: Options) -> None:
        self.options = options
        self._flush: timing.L2Flusher | None = None
        self._noise: timing.Noise | None = None
        self._inputs: dict[str, Any] = {}
        self._cache: dict[Key, Measurement] = {}
        self.elapsed_s = 0.0

    def seed(self, wl: Workload) -> int:
        return gpu.workload_seed(self.options.base_seed, "bench", wl.name)

    def inputs(self, wl: Workload) -> Any:
        """Fresh random q, k, v for this workload, or its serving.Batch (kept while its group is timed)."""
        if wl.name not in self._inputs:
            # no NaN in a cache's unused rows here: FA3 would carry them into its output (its issue 1745)
            self._inputs[wl.name] = serving.inputs_for(wl, self.seed(wl), self.options.device, nan_tails=False)
        return self._inputs[wl.name]

    def cached(self, group: Sequence[Workload], backends_: Sequence[str]) -> dict[Key, Measurement] | None:
        """The cached measurements of every pair, when they come from one set of rounds (else None)."""
        keys = [(w.name, b) for w in group for b in backends_]
        if not all(k in self._cache for k in keys):
            return None
        ids = {self._cache[k].pairing for k in keys if self._cache[k].available}
        return {k: self._cache[k] for k in keys} if len(ids) <= 1 else None

    def measure_group(self, group: Sequence[Workload], backends_: Sequence[str]) -> dict[Key, Measurement]:
        """Every (workload, backend) of the group, timed in the same rounds; cached. A backend that cannot run
        a workload is "not available" with why; one that raises while timed is too (CRASHED: why)."""
        hit = self.cached(group, backends_)
        if hit is not None:
            return hit
        t0 = time.monotonic()
        self._drop_inputs()
        out: dict[Key, Measurement] = {}
        ready: list[tuple[Workload, str, backends.Prepared]] = []
        for wl in group:
            for b in backends_:
                got = self.prepare(wl, b)
                if isinstance(got, Measurement):
                    out[(wl.name, b)] = got
                else:
                    ready.append((wl, b, got))
        try:
            out.update(self._time(group, ready))
        except Exception as e:  # noqa: BLE001 - a crash of the rounds (a sticky CUDA error): every pair says why
            why = f"{CRASHED}: {type(e).__name__}: {e}"
            out.update({(wl.name, b): not_available(wl, b, why, self.seed(wl)) for wl, b, _ in ready})
        self._cache.update(out)
        self.elapsed_s += time.monotonic() - t0
        return {(w.name, b): out[(w.name, b)] for w in group for b in backends_}

    def measure(self, wl: Workload, backend: str) -> Measurement:
        """One pair timed alone (its own rounds), or the cached one."""
        return self.measure_group([wl], [backend])[(wl.name, backend)]

    def prepare(self, wl: Workload, backend: str) -> backends.Prepared | Measurement:
        """A probed, ready call on this workload's inputs, or the "not available" Measurement saying why."""
        if (wl.name, backend) in self.options.untimed:
            return not_available(wl, backend, UNTIMED, self.seed(wl))
        inputs = self.inputs(wl)
        fault = self.options.fault if backend == "flashcore" else 0
        try:
            if isinstance(inputs, serving.Batch):
                prepared = backends.prepare_serving(backend, inputs, fault)
            else:
                q, k, v = inputs
                prepared = backends.prepare(backend, wl, q, k, v, fault)
            backends.probe(prepared)
        except backends.Unavailable as e:
            return not_available(wl, backend, str(e), self.seed(wl))
        return prepared

    def _time(self, group: Sequence[Workload], ready: list[tuple[Workload, str, backends.Prepared]]
              ) -> dict[Key, Measurement]:
        """The rounds (harness/bench/timing.py) of the prepared calls, with the kernels each one launched."""
        opts = self.options
        if self._flush is None:
            self._flush = timing.L2Flusher(opts.timing.flush_mib, opts.device)
        before: timing.Before | None = None
        noise = ""
        if opts.noisy:
            self._noise = self._noise or timing.Noise(opts.device)
            before, noise = self._noise, "noise: side-stream matmul bursts alongside FlashCore's calls"
        kernels: dict[Key, tuple[str, ...]] = {}
        calls = []
        for wl, b, prepared in ready:
            label = f"bench/{wl.name}/{b}"
            if opts.timing.record_kernels:
                with gpu.nvtx_range(label), prepared.context():
                    kernels[(wl.name, b)] = timing.kernel_names(prepared.fn)
            calls.append(timing.Call((wl.name, b), prepared.fn, prepared.context, label))
        decide: timing.Decide | None = None
        if opts.watches is not None:
            watched = extend.relevant(opts.watches, {(wl.name, b) for wl, b, _ in ready})

            def decide(base: timing.Rounds) -> set[str]:
                now = self._measurements(group, ready, base, kernels, noise)
                return extend.noisy(now, watched, opts.timing.extend_above)

        with gpu.nvtx_range(f"bench/rounds/{pairing_id(group)}"):
            got = timing.time_rounds(calls, opts.timing, self._flush, before, timing.nvtx_span(), decide)
        return self._measurements(group, ready, got, kernels, noise)

    def _measurements(self, group: Sequence[Workload], ready: list[tuple[Workload, str, backends.Prepared]],
                      got: timing.Rounds, kernels: dict[Key, tuple[str, ...]], noise: str) -> dict[Key, Measurement]:
        """The Measurement of each prepared call from the rounds so far (a call that raised: why)."""
        out: dict[Key, Measurement] = {}
        for wl, b, prepared in ready:
            key = (wl.name, b)
            if key in got.crashed:
                out[key] = not_available(wl, b, f"{CRASHED}: {got.crashed[key]}", self.seed(wl))
                continue
            planted = ", ".join(p for p in (prepared.planted, noise if b == "flashcore" else "") if p)
            out[key] = Measurement(
                wl.name, b, wl, available=True, times_ms=tuple(got.times_ms[key]), seed=self.seed(wl),
                clocks=got.clocks_end, implementation=prepared.implementation, kernels=kernels.get(key, ()),
                planted=planted, spread_groups=self.options.timing.spread_groups, rounds=tuple(got.round_index[key]),
                pairing=pairing_id(group), clock_mhz=tuple(got.clock_mhz[key]), clocks_start=got.clocks_start,
                base_rounds=got.base_rounds, clock_after_mhz=tuple(got.clock_after_mhz.get(key, ())))
        return out

    def _drop_inputs(self) -> None:
        if self._inputs:
            self._inputs = {}
            gpu.free_memory()

    def release(self) -> None:
        """Drop the inputs and buffers (the cache of results stays)."""
        self._inputs = {}
        self._flush = self._noise = None
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
