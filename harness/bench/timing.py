"""GPU timing: interleaved rounds of calls, CUDA events around each, L2 flushed before each, warm-up first.

One paired measurement (`time_rounds`) of several calls (the backends of a workload, or of every point of one
scaling sweep; harness/bench/paired.py says why):
1. Warm-up, per call: `warmup` calls, each after an L2 flush, timed with events (module load and cuDNN plan
   building stay out of the numbers; their median is the call's estimate).
2. A GPU spin (`head_start_ms`) lets the host's launches get ahead of the GPU, so no repetition waits on the
   host's launch overhead; then untimed rounds (the timed rounds' own calls, order, flushes and clock probes) for
   `warmup_ms` of GPU time. They end in the state the timed rounds run in: after warm-up calls run back to back
   without probes, the first 30-60 ms of timed rounds ran 5-10 % off the later clock on both GPUs
   (docs/perf-notes.md, "Sequential rounds").
3. The base rounds (TimingParams.rounds_for), queued without any host synchronization. Round r runs each call once
   (twice when `mirrored`: forward, then backward), in `paired.round_order(r)`; each call is
   flush (write a `flush_mib` buffer, far above the 50 MB L2 of an H100) -> event -> clock probe (a fixed-cycle
   spin, `clock_probe_us`) -> event -> the call -> event (-> the spin again -> event, for a call estimated at
   `clock_probe_after_ms` or more: its clock after). One synchronize at the end; NVML clocks and power are
   read while the warm-up rounds run and after the rounds.
4. With a `decide` function (the perf gates: harness/bench/extend.py), it reads the base rounds and names the
   workloads whose judged ratios spread too much: their calls alone get more rounds (head start and warm-up
   rounds again, then rounds numbered on from the base's, the same rotation), each workload up to its own cap
   (TimingParams.cap_rounds_for over its calls). Without one (make bench, make tune, a stored run: no check
   named), every call gets the cap's rounds at once.
Per-repetition times are the events around the call, in milliseconds, GPU clock only; the probe's time gives the
SM clock right before the call (cycles / time); a long call's clock is the mean of that and the one after it
(record.Measurement.call_clock_mhz: the power cap lowers the clock within a call of 0.1 s and more). Each
repetition keeps its round index, so pairs can be rebuilt
(paired.round_times sums a call's runs of one round).

Every benchmarked workload runs for milliseconds, so launch gaps are hidden by the queue; CUDA-graph replay
(for microsecond kernels) is not needed here. A call that raises is dropped from the following rounds and
reported with why; the others go on.

Test-only: `Noise` launches a matrix-product burst on a side stream alongside FlashCore's calls from the middle
of the base rounds on, extension rounds included (a neighbour's job that starts mid-measurement and contends with
one backend's kernels): the paired ratio's spread must catch it, however many rounds it gets.
"""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from harness.bench import paired
from harness.bench.clocks import kernel_names, max_sm_clock_mhz, nvtx_span, read_clocks
from harness.bench.settings import OURS, TimingParams

if TYPE_CHECKING:
    import torch

__all__ = ["Call", "L2Flusher", "Noise", "Rounds", "kernel_names", "max_sm_clock_mhz", "nvtx_span", "read_clocks",
           "sleep_cycles", "time_gpu", "time_rounds"]

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
    """Test-only: side-stream matmul bursts overlapping FlashCore's calls from the middle of the base rounds on,
    extension rounds included (`rounds` is the base's count)."""

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


@dataclass(frozen=True)
class Rounds:
    """What `time_rounds` measured, per call key."""

    rounds: int  # rounds queued, extension included
    times_ms: dict[Key, list[float]]
    round_index: dict[Key, list[int]]
    clock_mhz: dict[Key, list[float]]  # empty lists when the probe is off
    estimates_ms: dict[Key, float]
    crashed: dict[Key, str]  # calls that raised (warm-up or a round): why; their times are dropped
    clocks_start: dict[str, Any]
    clocks_end: dict[str, Any]
    base_rounds: int = 0  # rounds every call ran; rounds from this index on are extension rounds
    extended: frozenset[str] = field(default_factory=frozenset)  # workloads whose calls got extension rounds
    # the probe after each run of calls estimated at least clock_probe_after_ms; keys of other calls are absent
    clock_after_mhz: dict[Key, list[float]] = field(default_factory=dict)


Before = Callable[[int, int, Key, float], None]  # (round, base rounds, key, estimate_ms): test-only noise
Decide = Callable[[Rounds], Collection[str]]  # the base rounds -> the workloads that get extension rounds


class _Session:
    """The calls of one paired measurement on the GPU: estimates, calls that raised, queued events."""

    def __init__(self, calls: Sequence[Call], p: TimingParams, flush: L2Flusher, before_call: Before | None,
                 nvtx: Callable[[str], AbstractContextManager[Any]] | None) -> None:
        self.calls, self.p, self.flush, self.before_call = list(calls), p, flush, before_call
        self.span = nvtx or (lambda name: contextlib.nullcontext())
        self.cycles_per_ms = 1000 * (max_sm_clock_mhz() or DEFAULT_SM_MHZ)  # torch.cuda._sleep counts SM cycles
        self.probe = int(self.cycles_per_ms * p.clock_probe_us / 1000)
        self.crashed: dict[Key, str] = {}
        self.estimates: dict[Key, float] = {}
        self.queued: dict[Key, list[tuple[int, Any, Any, Any, Any]]] = {}
        self.clocks_start: dict[str, Any] = {}
        self.base = 0

    def warm_up(self) -> None:
        """`warmup` timed calls of each, one after another: the estimates (a call that raises is dropped)."""
        import torch

        for c in self.calls:
            starts, ends = _events(self.p.warmup), _events(self.p.warmup)
            try:
                with self.span(c.label), c.context():
                    for s, e in zip(starts, ends, strict=True):
                        self.flush()
                        s.record()
                        c.fn()
                        e.record()
                torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001 - this call fails; the others are still timed
                self.crashed[c.key] = _why(e)
                continue
            self.estimates[c.key] = statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends, strict=True))
        self.queued = {c.key: [] for c in self.live()}

    def live(self, workloads: Collection[str] | None = None) -> list[Call]:
        return [c for c in self.calls if c.key not in self.crashed and (workloads is None or c.key[0] in workloads)]

    def layout(self, calls: Sequence[Call]) -> list[list[Call]]:
        by_workload: dict[str, list[Call]] = {}
        for c in calls:
            by_workload.setdefault(c.key[0], []).append(c)
        return list(by_workload.values())

    def queue(self, calls: Sequence[Call], first: int, n: int, until: Mapping[str, int] | None = None) -> None:
        """Head start, untimed warm-up rounds, then timed rounds first..first+n-1 of `calls` (no synchronize);
        with `until`, a workload's calls stop before round until[workload] (its own cap)."""
        import torch

        if not calls or n <= 0:
            return
        layout = self.layout(calls)
        if self.p.head_start_ms:
            torch.cuda._sleep(int(self.cycles_per_ms * self.p.head_start_ms))
        warm = self.p.warmup_rounds([self.estimates[c.key] for c in calls])
        for r in range(first - warm, first):
            self._round(r, layout, timed=False)
        if not self.clocks_start:
            self.clocks_start = read_clocks()  # while the warm-up rounds run: the settled state
        for r in range(first, first + n):
            mine = layout if until is None else [g for g in layout if until.get(g[0].key[0], first + n) > r]
            self._round(r, mine, timed=True)

    def _round(self, r: int, layout: Sequence[Sequence[Call]], timed: bool) -> None:
        import torch

        for c in paired.round_order(r, layout, self.p.mirrored):
            if c.key in self.crashed:
                continue
            self.flush()
            if timed and self.before_call is not None:
                self.before_call(r, self.base, c.key, self.estimates[c.key])
            after = self.probe_after(c.key)
            e0, e1, e2, e3 = _events(4) if timed else (None, None, None, None)
            try:
                with self.span(c.label), c.context():
                    if self.probe:
                        _record(e0)
                        torch.cuda._sleep(self.probe)
                    _record(e1)
                    c.fn()
                    _record(e2)
                    if after:
                        torch.cuda._sleep(self.probe)
                        _record(e3)
            except Exception as e:  # noqa: BLE001
                self.crashed[c.key] = _why(e)
                continue
            if timed:
                self.queued[c.key].append((r, e0 if self.probe else None, e1, e2, e3 if after else None))

    def probe_after(self, key: Key) -> bool:
        """Whether this call's clock is also probed after it: a call long enough for the clock to move within it."""
        after_ms = self.p.clock_probe_after_ms
        return bool(self.probe) and after_ms > 0 and self.estimates.get(key, 0.0) >= after_ms

    def collect(self, rounds: int, extended: Collection[str] = ()) -> Rounds:
        """Wait for the GPU, then every live call's times, rounds and clocks so far."""
        import torch

        torch.cuda.synchronize()
        times: dict[Key, list[float]] = {}
        index: dict[Key, list[int]] = {}
        clock: dict[Key, list[float]] = {}
        clock_after: dict[Key, list[float]] = {}
        for key, items in self.queued.items():
            if key in self.crashed:
                continue
            times[key] = [e1.elapsed_time(e2) for _, _, e1, e2, _ in items]
            index[key] = [r for r, _, _, _, _ in items]
            # MHz = cycles per microsecond of the fixed-cycle spin
            clock[key] = [self.probe / (e0.elapsed_time(e1) * 1000) for _, e0, e1, _, _ in items] if self.probe else []
            if items and all(e3 is not None for *_, e3 in items):
                clock_after[key] = [self.probe / (e2.elapsed_time(e3) * 1000) for _, _, _, e2, e3 in items]
        return Rounds(rounds, times, index, clock, dict(self.estimates), dict(self.crashed),
                      self.clocks_start or read_clocks(), read_clocks(), self.base, frozenset(extended), clock_after)


def _record(event: Any) -> None:
    if event is not None:
        event.record()


def time_rounds(calls: Sequence[Call], p: TimingParams, flush: L2Flusher, before_call: Before | None = None,
                nvtx: Callable[[str], AbstractContextManager[Any]] | None = None,
                decide: Decide | None = None) -> Rounds:
    """Warm-up, then interleaved rounds of `calls`; with `decide`, base rounds and extension rounds for the
    workloads it names (see the module docstring)."""
    s = _Session(calls, p, flush, before_call, nvtx)
    s.warm_up()
    live = s.live()
    estimates = [s.estimates[c.key] for c in live]
    if decide is None:  # no check named: every call gets the cap at once
        s.base = p.cap_rounds_for(estimates) if live else 0
        s.queue(live, 0, s.base)
        return s.collect(s.base)
    s.base = p.rounds_for(estimates) if live else 0
    s.queue(live, 0, s.base)
    got = s.collect(s.base)
    more = s.live(set(decide(got)))
    # each extended workload up to its own cap: the rounds its calls alone would get (a 0.6 s round of the 128K sweep
    # point must not cap a 32 ms one at its 46 rounds, nor the other way round lengthen it)
    cap = {w: p.cap_rounds_for([s.estimates[c.key] for c in more if c.key[0] == w]) for w in {c.key[0] for c in more}}
    until = {w: n for w, n in cap.items() if n > s.base}
    if not until:
        return got
    extra = max(until.values()) - s.base
    s.queue([c for c in more if c.key[0] in until], s.base, extra, until)
    return replace(s.collect(s.base + extra, set(until)), clocks_start=got.clocks_start)


def time_gpu(fn: Callable[[], object], p: TimingParams, flush: L2Flusher) -> tuple[list[float], float]:
    """Per-repetition GPU times (ms) of `fn` timed alone (one call per round, the cap's rounds), and its warm-up
    estimate."""
    got = time_rounds([Call(("", ""), fn)], p, flush)
    if ("", "") in got.crashed:
        raise RuntimeError(got.crashed[("", "")])
    return got.times_ms[("", "")], got.estimates_ms[("", "")]
