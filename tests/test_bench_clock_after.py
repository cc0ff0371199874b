"""The clock probe after long calls (gates/bench.yaml timing.clock_probe_after_ms): what the per-clock ratio uses, that
the records keep it and that the settings refuse it without the probe (which calls get it: tests/test_bench_timing.py,
on its simulated GPU). CPU only."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from conftest import workload

from harness.bench import paired
from harness.bench.record import Measurement
from harness.bench.settings import load_bench_settings
from harness.config import load_config
from harness.schema import ConfigError

REPO = Path(__file__).resolve().parent.parent


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
