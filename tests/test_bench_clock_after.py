"""The clock probe after long calls (gates/bench.yaml timing.clock_probe_after_ms): which calls get it, what the
per-clock ratio uses, and that the records keep it. Timing runs on the SIMULATED GPU of tests/bench_sim.py (its clock
steps between 1980 and 1600 MHz every 40 ms); nothing here ran on a GPU."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from bench_sim import SimulatedGpu, simulate
from conftest import workload

from harness.bench import paired, timing
from harness.bench.record import Measurement
from harness.bench.settings import TimingParams, load_bench_settings
from harness.config import load_config
from harness.schema import ConfigError

REPO = Path(__file__).resolve().parent.parent

P = TimingParams(warmup=3, warmup_ms=0.0, min_reps=20, spread_groups=5, max_reps=20, target_ms=100.0, flush_mib=0,
                 head_start_ms=0.0, clock_probe_us=50.0, clock_probe_after_ms=20.0, record_kernels=False,
                 mirrored=False, extend_above=0.6, extend_target_ms=100.0, extend_min_reps=20, extend_max_reps=20)


@pytest.fixture
def gpu(monkeypatch: pytest.MonkeyPatch) -> SimulatedGpu:
    return simulate(monkeypatch)


def test_only_calls_longer_than_the_limit_are_probed_after(gpu: SimulatedGpu) -> None:
    calls = [timing.Call(("long", "flashcore"), gpu.kernel("long", 60.0)),
             timing.Call(("short", "flashcore"), gpu.kernel("short", 3.0))]
    got = timing.time_rounds(calls, P, timing.L2Flusher(0))
    assert set(got.clock_after_mhz) == {("long", "flashcore")}
    after, before = got.clock_after_mhz[("long", "flashcore")], got.clock_mhz[("long", "flashcore")]
    assert len(after) == len(before) == len(got.times_ms[("long", "flashcore")])
    assert {round(c) for c in after} <= {1980, 1600}
    # a 60 ms call spans a 40 ms clock step: in some rounds the clock it ends at is not the one it started at
    assert any(round(a) != round(b) for a, b in zip(after, before, strict=True))


def test_no_probe_after_when_the_limit_is_zero(gpu: SimulatedGpu) -> None:
    got = timing.time_rounds([timing.Call(("long", "flashcore"), gpu.kernel("long", 60.0))],
                             dataclasses.replace(P, clock_probe_after_ms=0.0), timing.L2Flusher(0))
    assert got.clock_after_mhz == {}


def _m(name: str, times: tuple[float, ...], before: tuple[float, ...], after: tuple[float, ...] = ()) -> Measurement:
    return Measurement(name, "flashcore", workload(name=name), available=True, times_ms=times,
                       rounds=tuple(range(len(times))), pairing="g", spread_groups=1, clock_mhz=before,
                       clock_after_mhz=after)


def test_a_long_call_whose_clock_fell_is_counted_at_the_mean_of_both_readings() -> None:
    # the long call starts at 1900 MHz and ends at 1500: per cycle it ran at (1900 + 1500) / 2, not at 1900
    long = _m("a", (200.0,) * 4, (1900.0,) * 4, (1500.0,) * 4)
    short = _m("b", (3.0,) * 4, (1700.0,) * 4)
    per_clock = paired.per_round_ratios(long, short, per_clock=True)
    assert per_clock is not None
    # same spec: throughput per cycle of a over b = (time_b x clock_b) / (time_a x clock_a)
    assert per_clock == pytest.approx([3.0 * 1700.0 / (200.0 * 1700.0)] * 4)
    before_only = paired.per_round_ratios(dataclasses.replace(long, clock_after_mhz=()), short, per_clock=True)
    assert before_only is not None and before_only[0] < per_clock[0]  # the probe before alone understated it


def test_the_record_keeps_the_readings_after() -> None:
    m = _m("a", (200.0, 201.0), (1900.0, 1880.0), (1500.0, 1510.0))
    back = Measurement.from_dict(m.to_dict())
    assert back.clock_after_mhz == (1500.0, 1510.0) and back.call_clock_mhz() == (1700.0, 1695.0)
    assert Measurement.from_dict({**m.to_dict(), "clock_after_mhz": []}).call_clock_mhz() == (1900.0, 1880.0)


def test_readings_after_that_do_not_match_the_repetitions_are_refused() -> None:
    with pytest.raises(ValueError, match="after"):
        _m("a", (200.0, 201.0), (1900.0, 1880.0), (1500.0,))


def test_a_probe_after_without_the_probe_is_refused(tmp_path: Path) -> None:
    text = (REPO / "gates" / "bench.yaml").read_text()
    assert "clock_probe_us: 300" in text
    bad = tmp_path / "bench.yaml"
    bad.write_text(text.replace("clock_probe_us: 300", "clock_probe_us: 0", 1))
    with pytest.raises(ConfigError, match="timing.clock_probe_after_ms"):
        load_bench_settings(load_config(REPO / "gates"), bad)
