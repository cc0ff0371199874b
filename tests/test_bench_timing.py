"""The interleaved timing loop (harness/bench/timing.py time_rounds) and the Measurer (runner.py) on the CPU,
against a SIMULATED GPU (tests/bench_sim.py: a timeline whose SM clock steps between 1980 and 1600 MHz every
40 ms). Nothing here ran on a GPU."""

from __future__ import annotations

import dataclasses
import statistics
import typing
from collections import Counter
from typing import Any

import pytest
from bench_sim import SimulatedGpu, simulate, simulated_backends
from conftest import workload

from harness.bench import paired, runner, timing
from harness.bench.record import CRASHED
from harness.bench.settings import TimingParams
from harness.bench.stats import summarize, summarize_ratios

P = TimingParams(warmup=5, warmup_ms=30.0, min_reps=20, spread_groups=5, max_reps=100, target_ms=100.0, flush_mib=0,
                 head_start_ms=2.0, clock_probe_us=50.0, clock_probe_after_ms=0.0, record_kernels=False, mirrored=False,
                 extend_above=0.6, extend_target_ms=100.0, extend_min_reps=20, extend_max_reps=100)


@pytest.fixture
def gpu(monkeypatch: pytest.MonkeyPatch) -> SimulatedGpu:
    return simulate(monkeypatch)


def test_rounds_pair_the_calls_under_a_stepping_clock(gpu: SimulatedGpu) -> None:
    calls = [timing.Call(("w", "flashcore"), gpu.kernel("fc", 3.5)),
             timing.Call(("w", "fa2"), gpu.kernel("fa2", 6.0))]
    got = timing.time_rounds(calls, P, timing.L2Flusher(0))
    est = [got.estimates_ms[c.key] for c in calls]
    # alone: 29 x 3.5 ms and 20 x 6 ms (min_reps); together, rounds of 9.5 ms in that 221.5 ms
    assert est == [3.5, 6.0] and got.rounds == P.rounds_for(est) == 23
    fc, fa2 = got.times_ms[("w", "flashcore")], got.times_ms[("w", "fa2")]
    assert got.round_index[("w", "flashcore")] == got.round_index[("w", "fa2")] == list(range(23))
    assert max(fc) / min(fc) == pytest.approx(1980 / 1600)  # absolute times follow the clock...
    ratios = [b / a for a, b in zip(fc, fa2, strict=True)]  # ...their ratio does not, unless a step falls
    exact = [r for r in ratios if r == pytest.approx(6.0 / 3.5)]  # between the two calls of a round
    assert len(exact) >= 0.75 * len(ratios)
    paired_ratio = summarize_ratios(ratios, 5)
    assert paired_ratio.median == pytest.approx(6.0 / 3.5) and paired_ratio.rel_std < 0.02
    assert summarize(fc, 5).rel_std > 0.05  # what judging absolute times would have seen
    assert set(round(c) for c in got.clock_mhz[("w", "fa2")]) == {1980, 1600}  # the probe reads the clock
    # warm-up: 5 timed calls each, then untimed rounds for 30 ms (4 of 9.6 ms with the probes), then the rounds
    assert P.warmup_rounds(est) == 4
    assert Counter(gpu.calls) == {"fc": 5 + 4 + 23, "fa2": 5 + 4 + 23}
    tail = gpu.calls[-2 * 23:]
    assert tail[0:2] == ["fc", "fa2"] and tail[2:4] == ["fa2", "fc"]  # the starting backend rotates
    assert got.clocks_start["source"] == "simulated" and not got.crashed


class RampingGpu(SimulatedGpu):
    """The clock falls linearly from 1980 to 1400 MHz and climbs back, over `period_ms` (a drift under the cap)."""

    def __init__(self, period_ms: float) -> None:
        super().__init__()
        self.period_ms = period_ms

    def mhz(self) -> float:
        phase = (self.now % self.period_ms) / self.period_ms
        return 1400.0 + 580.0 * abs(1 - 2 * phase)

    def kernel(self, name: str, ms_at_max: float) -> Any:
        def run() -> None:  # the clock moves during the call: its cycles run at the clock of each 0.5 ms
            self.calls.append(name)
            left = ms_at_max * 1980.0
            while left > 1e-6:
                step = min(0.5, left / self.mhz())
                left -= step * self.mhz()
                self.now += step
        return run


def _ramp_ratios(gpu: SimulatedGpu, mirrored: bool) -> list[float]:
    gpu.__class__ = RampingGpu  # the patched events and spin keep reading this timeline
    ramp = typing.cast(RampingGpu, gpu)
    ramp.period_ms, ramp.now = 2900.0, 0.37  # the clock's phase owes nothing to the rounds
    calls = [timing.Call(("w", "flashcore"), ramp.kernel("fc", 50.0)),
             timing.Call(("w", "fa3"), ramp.kernel("fa3", 48.0)),
             timing.Call(("w", "fa2"), ramp.kernel("fa2", 115.0))]
    got = timing.time_rounds(calls, dataclasses.replace(P, mirrored=mirrored, min_reps=40,
                                                                  extend_min_reps=40), timing.L2Flusher(0))
    assert len(got.times_ms[("w", "flashcore")]) == 40
    ours, base = (paired.round_times(got.round_index[("w", b)], got.times_ms[("w", b)]) for b in ("flashcore", "fa2"))
    return [base[r][0] / ours[r][0] for r in ours]


def test_mirrored_rounds_cancel_a_clock_drifting_across_the_block(gpu: SimulatedGpu) -> None:
    # 64K tokens causal under the cap: 50 ms FlashCore, 48 ms FA3, 115 ms FA2; the clock drifts 1980-1400 MHz
    plain, mirrored = _ramp_ratios(gpu, False), _ramp_ratios(gpu, True)
    truth = 115.0 / 50.0
    jitter = [summarize_ratios(v, 5).rel_std for v in (plain, mirrored)]
    typical = [statistics.median(abs(r / truth - 1) for r in v) for v in (plain, mirrored)]
    assert typical[0] > 0.015 and typical[1] < 0.005  # the neighbours' clocks differ; mirrored, they average out
    assert jitter[1] < jitter[0] / 3  # (rounds across a turn of the clock keep some error)
    assert summarize_ratios(mirrored, 5).median == pytest.approx(truth, rel=0.005)


def test_a_call_that_raises_in_the_rounds_is_dropped_with_why(gpu: SimulatedGpu) -> None:
    ok = gpu.kernel("ok", 2.0)
    seen = {"n": 0}

    def flaky() -> None:
        seen["n"] += 1
        if seen["n"] == 40:
            raise RuntimeError("CUDA error: an illegal memory access was encountered\nmore text")
        ok()

    calls = [timing.Call(("w", "ok"), gpu.kernel("ok", 2.0)), timing.Call(("w", "bad"), flaky)]
    got = timing.time_rounds(calls, P, timing.L2Flusher(0))
    assert got.crashed == {("w", "bad"): "RuntimeError: CUDA error: an illegal memory access was encountered"}
    assert ("w", "bad") not in got.times_ms and len(got.times_ms[("w", "ok")]) == got.rounds


def test_a_call_that_fails_its_warm_up_is_never_timed(gpu: SimulatedGpu) -> None:
    def broken() -> None:
        raise ValueError("refused")

    got = timing.time_rounds([timing.Call(("w", "ok"), gpu.kernel("ok", 2.0)), timing.Call(("w", "x"), broken)],
                             P, timing.L2Flusher(0))
    assert got.crashed == {("w", "x"): "ValueError: refused"} and got.rounds == P.reps_for(2.0)


def test_noise_hook_sees_every_call_with_its_round(gpu: SimulatedGpu) -> None:
    seen: list[tuple[int, int, tuple[str, str]]] = []
    calls = [timing.Call(("a", "flashcore"), gpu.kernel("fc", 2.0)),
             timing.Call(("b", "flashcore"), gpu.kernel("b", 2.0))]
    got = timing.time_rounds(calls, P, timing.L2Flusher(0),
                             before_call=lambda r, n, key, est: seen.append((r, n, key)))
    assert len(seen) == 2 * got.rounds and {n for _, n, _ in seen} == {got.rounds}
    assert [k[0] for r, _, k in seen if r == 1] == ["b", "a"]  # workloads rotate too


def test_time_gpu_is_one_call_timed_alone(gpu: SimulatedGpu) -> None:
    times, estimate = timing.time_gpu(gpu.kernel("x", 4.0), P, timing.L2Flusher(0))
    assert len(times) == P.reps_for(estimate) == 26 and estimate == pytest.approx(4.0)


# ---- the Measurer on the simulated GPU (backends replaced by simulated kernels) -----------------------------


@pytest.fixture
def measurer(gpu: SimulatedGpu, monkeypatch: pytest.MonkeyPatch) -> runner.Measurer:
    gpu.step_ms = 300.0  # rounds of ~30 ms: a step falls inside a pair now and then
    simulated_backends(monkeypatch, gpu, {"flashcore": 3.5, "fa2": 6.0, "cudnn": 3.2})
    return runner.Measurer(runner.Options(dataclasses.replace(P, record_kernels=True), base_seed=1, device="cpu"))


def test_a_group_shares_its_rounds_and_is_measured_once(measurer: runner.Measurer, gpu: SimulatedGpu) -> None:
    a, b = workload("a", sq=4096, sk=4096), workload("b", sq=8192, sk=8192)
    got = measurer.measure_group([a, b], ["flashcore", "fa2", "fa3"])
    ours, fa2, fa3 = got[("a", "flashcore")], got[("a", "fa2")], got[("a", "fa3")]
    assert ours.pairing == fa2.pairing == got[("b", "flashcore")].pairing == "a+b"
    assert not fa3.available and fa3.why == "FA3 not importable: simulated"
    assert ours.kernels == ("simulated_kernel",) and ours.implementation == "simulated flashcore"
    assert ours.clocks_start["source"] == "simulated" and len(ours.clock_mhz) == len(ours.times_ms)
    r = paired.speed_ratio(ours, fa2)
    assert r is not None and r.value == pytest.approx(6.0 / 3.5) and r.rel_std < 0.02
    scaling = paired.ratio(got[("b", "flashcore")], ours)  # TFLOPS: 4x the FLOPs (S^2) in 2 / 1.5 the time
    assert scaling is not None and scaling.value == pytest.approx(4 * 1.5 / 2)
    n = len(gpu.calls)
    assert measurer.measure_group([a], ["fa2", "flashcore"])[("a", "fa2")] is fa2  # cached: nothing ran
    assert measurer.measure(b, "flashcore") is got[("b", "flashcore")] and len(gpu.calls) == n
    measurer.measure_group([a], ["flashcore", "cudnn"])  # a backend not in those rounds: new rounds
    assert len(gpu.calls) > n and measurer.measure(a, "flashcore").pairing == "a"


def test_planted_faults_and_noise_are_labelled(gpu: SimulatedGpu, measurer: runner.Measurer,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    hits: list[tuple[int, tuple[str, str]]] = []

    class Noise:
        def __init__(self, device: str) -> None:
            pass

        def __call__(self, r: int, rounds: int, key: tuple[str, str], estimate_ms: float) -> None:
            hits.append((r, key))

    monkeypatch.setattr(timing, "Noise", Noise)
    noisy = runner.Measurer(dataclasses.replace(measurer.options, noisy=True, fault=4))
    got = noisy.measure_group([workload("a")], ["flashcore", "fa2"])
    assert got[("a", "flashcore")].planted == "kernel debug_fault 4, noise: side-stream matmul bursts alongside " \
        "FlashCore's calls"
    assert got[("a", "fa2")].planted == ""
    assert {k for _, k in hits} == {("a", "flashcore"), ("a", "fa2")}  # the hook sees every call; Noise picks


def test_a_crash_of_the_rounds_makes_every_pair_say_why(measurer: runner.Measurer,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    def lost(*args: object, **kw: object) -> None:
        raise RuntimeError("CUDA error: unspecified launch failure")

    monkeypatch.setattr(timing, "time_rounds", lost)
    got = measurer.measure_group([workload("a")], ["flashcore", "fa2", "fa3"])
    assert got[("a", "flashcore")].why == f"{CRASHED}: RuntimeError: CUDA error: unspecified launch failure"
    assert got[("a", "fa3")].why == "FA3 not importable: simulated"  # its own reason stays


# The clock probe after long calls (gates/bench.yaml clock_probe_after_ms; what the ratios do with it:
# tests/test_bench_clock_after.py)
AFTER = dataclasses.replace(P, clock_probe_after_ms=20.0)


def test_only_calls_longer_than_the_limit_are_probed_after(gpu: SimulatedGpu) -> None:
    calls = [timing.Call(("long", "flashcore"), gpu.kernel("long", 60.0)),
             timing.Call(("short", "flashcore"), gpu.kernel("short", 3.0))]
    got = timing.time_rounds(calls, AFTER, timing.L2Flusher(0))
    assert set(got.clock_after_mhz) == {("long", "flashcore")}
    after, before = got.clock_after_mhz[("long", "flashcore")], got.clock_mhz[("long", "flashcore")]
    assert len(after) == len(before) == len(got.times_ms[("long", "flashcore")])
    assert {round(c) for c in after} <= {1980, 1600}
    # a 60 ms call spans a 40 ms clock step: in some rounds the clock it ends at is not the one it started at
    assert any(round(a) != round(b) for a, b in zip(after, before, strict=True))


def test_no_probe_after_when_the_limit_is_zero(gpu: SimulatedGpu) -> None:
    got = timing.time_rounds([timing.Call(("long", "flashcore"), gpu.kernel("long", 60.0))],
                             P, timing.L2Flusher(0))
    assert got.clock_after_mhz == {}
