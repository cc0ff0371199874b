"""FLOP and byte counts against the ROADMAP anchors' shapes, and the statistics of repetition times."""

from __future__ import annotations

import math

import pytest
from conftest import workload

from harness.bench import flops as fl
from harness.bench.record import Measurement
from harness.bench.settings import TimingParams
from harness.bench.stats import percentile, summarize
from harness.schema import Workload


def test_prefill_flops_match_the_anchor_convention() -> None:
    # B4 H16 S8192 D128: 4*B*H*S*S*D = 2^41 FLOP; FA3's anchor (625 TFLOPS) is then a 3.518 ms call
    assert fl.attention_flops(4, 16, 8192, 8192, 128, causal=False) == 2**41
    assert fl.tflops(2**41, 3.5184) == pytest.approx(625.0, rel=1e-4)
    # the FA2 anchor of the same shape (351 TFLOPS) is 6.265 ms
    assert fl.tflops(2**41, 6.2650) == pytest.approx(351.0, rel=1e-3)


@pytest.mark.parametrize(("b", "h", "s", "d"), [(16, 16, 2048, 64), (8, 16, 4096, 128), (2, 16, 16384, 128),
                                                (1, 16, 32768, 128), (4, 16, 8192, 256)])
def test_causal_with_equal_lengths_is_half(b: int, h: int, s: int, d: int) -> None:
    full = fl.attention_flops(b, h, s, s, d, causal=False)
    assert full == 4 * b * h * s * s * d
    assert fl.attention_flops(b, h, s, s, d, causal=True) == full / 2  # not s*(s+1)/2 pairs: the anchors' rule


def test_anchor_sweep_shapes_do_equal_work_per_token() -> None:
    # the anchors hold 32K tokens per batch: non-causal FLOPs grow linearly with S
    work = [fl.attention_flops(32768 // s, 16, s, s, 128, False) for s in (2048, 4096, 8192, 16384, 32768)]
    assert [w / work[0] for w in work] == [1, 2, 4, 8, 16]


def test_causal_with_unequal_lengths_counts_visible_pairs() -> None:
    # bottom-right aligned masks of FlashAttention's docstring: Sq=2, Sk=5 keeps 4 + 5 keys; Sq=5, Sk=2 keeps 0+0+0+1+2
    assert fl.visible_pairs(2, 5) == 9
    assert fl.visible_pairs(5, 2) == 3
    assert fl.visible_pairs(300, 1000) == sum(701 + i for i in range(300))
    assert fl.attention_flops(1, 1, 2, 5, 64, causal=True) == 4 * 9 * 64


def test_decode_bytes_and_bandwidth_match_the_anchor() -> None:
    # Sq=1, B=64 H=32 Sk=8192 D=128 bf16: K and V are 2 * 64 * 8192 * 32 * 128 * 2 bytes = 8 GiB
    assert fl.kv_bytes(64, 32, 8192, 128, "bf16") == 8 * 2**30
    t_fa3 = 8 * 2**30 / 3.05e12 * 1e3  # FA3's anchor, 3.05 TB/s
    assert t_fa3 == pytest.approx(2.8164, abs=1e-4)
    assert fl.tbps(8 * 2**30, t_fa3) == pytest.approx(3.05)
    # GQA: only the K/V heads are read
    assert fl.kv_bytes(2, 8, 2048, 128, "bf16") == fl.kv_bytes(2, 32, 2048, 128, "bf16") // 4


def test_measurement_throughput_uses_tbps_for_memory_bound() -> None:
    decode = Workload("decode", 64, 32, 32, 1, 8192, 128, "bf16", False, "memory-bound", "test")
    t = 8 * 2**30 / 3.05e12 * 1e3
    m = Measurement("decode", "fa3", decode, True, times_ms=(t, t, t))
    assert m.unit == "TB/s" and m.throughput == pytest.approx(3.05)
    prefill = workload("p", b=4, hq=16, hkv=16, sq=8192, sk=8192, d=128)
    m = Measurement("p", "fa3", prefill, True, times_ms=(3.5184,) * 3)
    assert m.unit == "TFLOPS" and m.throughput == pytest.approx(625.0, rel=1e-4)


def test_summary_statistics() -> None:
    s = summarize([1.0, 2.0, 3.0, 4.0, 5.0])
    assert (s.reps, s.median_ms, s.mean_ms, s.min_ms, s.max_ms) == (5, 3.0, 3.0, 1.0, 5.0)
    assert (s.p20_ms, s.p80_ms) == (pytest.approx(1.8), pytest.approx(4.2))  # linear interpolation, as numpy
    assert s.rel_std == pytest.approx(math.sqrt(2.5) / 3)  # sample std / mean
    assert summarize([2.0, 2.0]).rel_std == 0.0
    assert percentile([5.0], 80) == 5.0


@pytest.mark.parametrize("bad", [[], [1.0], [1.0, float("nan")], [1.0, 0.0], [1.0, -2.0]])
def test_summary_refuses_what_is_not_a_timing(bad: list[float]) -> None:
    with pytest.raises(ValueError):
        summarize(bad)


def test_reps_follow_the_time_budget() -> None:
    t = TimingParams(warmup=5, warmup_ms=300.0, min_reps=20, spread_groups=5, max_reps=100, target_ms=1000.0,
                     flush_mib=256, head_start_ms=20.0, clock_probe_us=50.0,
                     clock_probe_after_ms=0.0, record_kernels=True, mirrored=False,
                     extend_above=0.6, extend_target_ms=1000.0, extend_min_reps=20, extend_max_reps=100)
    assert t.reps_for(3.0) == 100  # a 3 ms call: capped
    assert t.reps_for(25.0) == 41
    assert t.reps_for(60.0) == 20  # big shapes: fewer repetitions, never below min_reps
    assert t.reps_for(0.0) == 100


def test_grouped_spread_ignores_launch_jitter_but_not_drift_or_bursts() -> None:
    """On absolute times (a drift shows: why the gates judge paired ratios instead, tests/test_bench_paired.py)."""
    jitter = [1.0 + (0.05 if i % 2 else -0.05) for i in range(40)]  # +-5 % per launch, stable run to run
    s = summarize(jitter, groups=5)
    assert s.rep_rel_std > 0.04 and s.rel_std < 0.01 and s.groups == 5
    drift = [1.0] * 20 + [1.1] * 20  # the second half is 10 % slower
    assert summarize(drift, groups=5).rel_std > 0.04
    burst = [1.0] * 32 + [1.5] * 8  # interference during the last fifth
    assert summarize(burst, groups=5).rel_std > 0.1
    assert summarize(jitter, groups=1).rel_std == s.rep_rel_std  # one group: the per-repetition spread
    with pytest.raises(ValueError, match="10 repetitions"):
        summarize([1.0] * 9, groups=5)
