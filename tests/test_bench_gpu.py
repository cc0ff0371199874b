"""GPU checks of the measuring code itself (H100): the event timer, the L2 flush, backend probing."""

from __future__ import annotations

import pytest
from conftest import workload

from harness.bench import backends, timing
from harness.bench.runner import Measurer, Options
from harness.bench.settings import TimingParams

pytestmark = pytest.mark.gpu

FAST = TimingParams(warmup=3, warmup_ms=0.0, min_reps=20, spread_groups=5, max_reps=20, target_ms=1.0, flush_mib=256,
                    head_start_ms=5.0, record_kernels=True)


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
    assert m.clocks.get("sm_mhz")
