"""GPU checks of the measuring code itself (H100): the event timer, the L2 flush, the clock probe, the
interleaved rounds, backend probing."""

from __future__ import annotations

import pytest
from conftest import workload

from harness.bench import backends, timing
from harness.bench.runner import Measurer, Options
from harness.bench.settings import TimingParams

pytestmark = pytest.mark.gpu

FAST = TimingParams(warmup=3, warmup_ms=0.0, min_reps=20, spread_groups=5, max_reps=20, target_ms=1.0, flush_mib=256,
                    head_start_ms=5.0, clock_probe_us=50.0,
                    clock_probe_after_ms=0.0, record_kernels=True, mirrored=False,
                    extend_above=0.6, extend_target_ms=1.0, extend_min_reps=20, extend_max_reps=20)


def test_event_timer_times_the_call_not_the_flush_or_the_host() -> None:
    import torch

    cycles = timing.sleep_cycles(2.0)  # a 2 ms spin at the max SM clock
    times, estimate = timing.time_gpu(lambda: torch.cuda._sleep(cycles), FAST, timing.L2Flusher(256))
    assert len(times) == 20 and 1.0 < estimate < 4.0
    assert all(1.0 < t < 4.0 for t in times)  # the 256 MiB flush (~0.1 ms) is outside the events
    host_heavy = timing.time_gpu(lambda: (sum(range(20000)), torch.cuda._sleep(cycles)), FAST,
                                 timing.L2Flusher(256))[0]
    assert max(host_heavy) < 1.2 * max(times)  # host work between launches stays hidden by the queue


def test_flush_makes_a_small_read_come_from_dram() -> None:
    import torch

    x = torch.randn(16 << 20, device="cuda")  # 64 MiB read... larger than L2 once flushed
    small = x[: 4 << 20]  # 16 MiB: fits the 50 MB L2
    hot = timing.time_gpu(lambda: small.sum(), FAST, timing.L2Flusher(0))[0]
    cold = timing.time_gpu(lambda: small.sum(), FAST, timing.L2Flusher(256))[0]
    assert sorted(cold)[10] > sorted(hot)[10]


def test_rounds_interleave_the_calls_and_probe_the_clock() -> None:
    """Two spins of 1 and 2 ms in the same rounds: each gets every round, their per-round ratio is ~2 whatever
    the clock, and the probe reads an SM clock between 500 and 2100 MHz."""
    import torch

    one, two = timing.sleep_cycles(1.0), timing.sleep_cycles(2.0)
    calls = [timing.Call(("w", "a"), lambda: torch.cuda._sleep(one)),
             timing.Call(("w", "b"), lambda: torch.cuda._sleep(two))]
    got = timing.time_rounds(calls, FAST, timing.L2Flusher(256))
    assert not got.crashed and got.rounds == 20
    assert got.round_index[("w", "a")] == got.round_index[("w", "b")] == list(range(20))
    ratios = [b / a for a, b in zip(got.times_ms[("w", "a")], got.times_ms[("w", "b")], strict=True)]
    assert all(1.9 < r < 2.1 for r in ratios)
    assert all(500 < c < 2100 for c in got.clock_mhz[("w", "a")])
    assert got.clocks_start and got.clocks_end


def test_a_call_that_raises_is_dropped_and_the_others_go_on() -> None:
    import torch

    cycles = timing.sleep_cycles(0.5)
    state = {"n": 0}

    def flaky() -> None:
        state["n"] += 1
        if state["n"] > 8:  # after its warm-up: in the rounds
            raise RuntimeError("refused mid-way")
        torch.cuda._sleep(cycles)

    calls = [timing.Call(("w", "ok"), lambda: torch.cuda._sleep(cycles)), timing.Call(("w", "bad"), flaky)]
    got = timing.time_rounds(calls, FAST, timing.L2Flusher(0))
    assert got.crashed == {("w", "bad"): "RuntimeError: refused mid-way"}
    assert len(got.times_ms[("w", "ok")]) == 20 and ("w", "bad") not in got.times_ms


def test_sdpa_backend_refusing_the_inputs_is_not_available() -> None:
    import torch

    wl = workload("w", b=1, hq=2, hkv=2, sq=128, sk=128, d=64)
    q = torch.randn(1, 128, 2, 64, device="cuda", dtype=torch.float32)  # the flash backend takes fp16/bf16 only
    with pytest.raises(backends.Unavailable, match="RuntimeError"):
        backends.probe(backends.prepare("fa2", wl, q, q, q))


def test_measurement_names_the_kernels_that_ran() -> None:
    wl = workload("w", b=2, hq=8, hkv=8, sq=1024, sk=1024, d=128)
    m = Measurer(Options(FAST, base_seed=1)).measure(wl, "fa2")
    assert m.available and m.summary is not None and m.summary.reps == 20
    assert any("flash" in k.lower() for k in m.kernels), m.kernels
    assert m.clocks.get("sm_mhz") and m.clocks_start and len(m.clock_mhz) == 20 and m.paired


def test_a_group_is_timed_in_the_same_rounds() -> None:
    from harness.bench import paired

    wl = workload("w", b=2, hq=8, hkv=8, sq=1024, sk=1024, d=128)
    got = Measurer(Options(FAST, base_seed=1)).measure_group([wl], ["fa2", "efficient"])
    fa2, eff = got[("w", "fa2")], got[("w", "efficient")]
    assert fa2.pairing == eff.pairing == "w" and fa2.rounds == eff.rounds
    r = paired.speed_ratio(fa2, eff)
    assert r is not None and r.value > 1.0  # the flash kernel beats the memory-efficient one
