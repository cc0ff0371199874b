"""Paired, interleaved measurement (harness/bench/paired.py) on SYNTHETIC rounds shaped like the lent H100's
clock drift (tests/fixtures/bench/synthesize.py: the clock steps up to +-10 % every 6-19 rounds, each call
scales with it, +-0.3 % jitter): the schedule, the round budget, and what drift and interference do to a
paired ratio's spread. Nothing here was measured on a GPU."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from typing import Any

import pytest
from conftest import workload
from fixtures.bench.synthesize import DECODE, PREFILL, clock_factor, paired_rounds

from harness.bench import paired
from harness.bench.record import Measurement, parse_run, run_dict
from harness.bench.settings import TimingParams
from harness.bench.stats import summarize_ratios, theil_sen_slope

TIMING = TimingParams(warmup=5, warmup_ms=300.0, min_reps=20, spread_groups=5, max_reps=100, target_ms=1000.0,
                      flush_mib=256, head_start_ms=20.0, clock_probe_us=50.0,
                      clock_probe_after_ms=0.0, record_kernels=True, mirrored=False,
                      extend_above=0.6, extend_target_ms=1000.0, extend_min_reps=20, extend_max_reps=100)
# prefill-d128 on the lent H100 (device run 19): time at the max clock, ms
PREFILL_MS = {"flashcore": 3.50, "fa2": 6.00, "cudnn": 3.23, "fa3": 2.97}


def prefill(rounds: int = 100, **kw: Any) -> dict[tuple[str, str], Measurement]:
    return paired_rounds({(PREFILL, b): t for b, t in PREFILL_MS.items()}, rounds, **kw)


def speed(ms: dict[tuple[str, str], Measurement], base: str, wl: str = "prefill-d128") -> paired.PairedRatio:
    r = paired.speed_ratio(ms[(wl, "flashcore")], ms[(wl, base)])
    assert r is not None
    return r


# ---- schedule ------------------------------------------------------------------------------------------------


def test_each_round_runs_every_call_once_and_the_start_rotates() -> None:
    layout = [["a/fc", "a/fa2", "a/cudnn", "a/fa3"], ["b/fc", "b/fa2", "b/cudnn", "b/fa3"]]
    orders = [paired.round_order(r, layout) for r in range(8)]
    assert all(sorted(o) == sorted(layout[0] + layout[1]) for o in orders)
    assert Counter(o[0] for o in orders) == {"a/fc": 2, "b/fa2": 2, "a/cudnn": 2, "b/fa3": 2}
    # the backends of a workload stay back to back (a pair is close in time), each first equally often
    assert orders[1] == ["b/fa2", "b/cudnn", "b/fa3", "b/fc", "a/fa2", "a/cudnn", "a/fa3", "a/fc"]
    firsts = Counter(o[o.index(next(c for c in o if c.startswith("a/")))] for o in orders)
    assert set(firsts.values()) == {2}
    assert paired.round_order(3, [["only"]]) == ["only"]


def test_a_mirrored_round_runs_each_block_forward_then_backward() -> None:
    layout = [["a/fc", "a/fa2", "a/cudnn"], ["b/fc", "b/fa2"]]
    assert paired.round_order(1, layout, mirrored=True) == [
        "b/fa2", "b/fc", "b/fc", "b/fa2", "a/fa2", "a/cudnn", "a/fc", "a/fc", "a/cudnn", "a/fa2"]
    # whatever the calls' lengths, each call's two runs are centred on the same instant (its block's middle)
    length = {"a/fc": 50.0, "a/fa2": 115.0, "a/cudnn": 61.0, "b/fc": 3.0, "b/fa2": 7.0}
    for r in range(6):
        t, centres = 0.0, dict[str, list[float]]()
        for c in paired.round_order(r, layout, mirrored=True):
            centres.setdefault(c, []).append(t + length[c] / 2)
            t += length[c]
        mid = {c: sum(v) / 2 for c, v in centres.items()}
        assert all(len(v) == 2 for v in centres.values())
        assert mid["a/fc"] == pytest.approx(mid["a/fa2"]) == pytest.approx(mid["a/cudnn"])
        assert mid["b/fc"] == pytest.approx(mid["b/fa2"])


def test_mirrored_rounds_count_runs_not_rounds() -> None:
    m = dataclasses.replace(TIMING, mirrored=True)
    assert m.rounds_for([25.0]) == 20 and TIMING.rounds_for([25.0]) == 41  # within the same GPU time: 40 runs
    assert m.rounds_for([100.0, 100.0]) == 10  # min_reps 20 runs of each
    assert m.rounds_for([3.0]) == 50 and m.rounds_for([]) == 50  # max_reps 100 runs
    assert dataclasses.replace(m, min_reps=21).rounds_for([100.0]) == 11  # rounded up to whole rounds


def test_round_times_sum_the_runs_of_a_round() -> None:
    got = paired.round_times([0, 0, 1, 1], [2.0, 3.0, 4.0, 4.0], [1000.0, 2000.0, 1500.0, 1500.0])
    assert got == {0: (5.0, pytest.approx(1600.0)), 1: (8.0, 1500.0)}
    assert paired.round_times([0, 1], [2.0, 3.0]) == {0: (2.0, None), 1: (3.0, None)}  # no clock probe
    assert paired.round_times([0, 0], [2.0, 3.0], [1000.0, 0.0]) == {0: (5.0, None)}  # a reading missing


def test_rounds_never_add_repetitions_or_gpu_time() -> None:
    # prefill-d128, 5 backends (device run 19): alone they would get 100, 100, 100, 82 and 100 repetitions
    est = [3.75, 6.2, 3.5, 12.2, 3.2]
    rounds = TIMING.rounds_for(est)
    alone = [TIMING.reps_for(e) for e in est]
    assert alone == [100, 100, 100, 82, 100] and rounds == 92
    assert rounds * len(est) <= sum(alone)
    assert rounds * sum(est) <= sum(r * e for r, e in zip(alone, est, strict=True))
    assert TIMING.rounds_for([3.0]) == TIMING.reps_for(3.0) == 100  # one call: exactly as before
    assert TIMING.rounds_for([25.0]) == TIMING.reps_for(25.0) == 41
    assert TIMING.rounds_for([1.0, 60.0]) == 21  # a fast and a slow call: never below min_reps
    assert TIMING.rounds_for([100.0, 100.0]) == 20
    # warm-up rounds: 300 ms with the 50 us probes, at least one round
    assert TIMING.warmup_rounds([3.0]) == 99 and TIMING.warmup_rounds([400.0]) == 1


# ---- drift and interference ------------------------------------------------------------------------------------


def test_clock_steps_shared_by_all_backends_cancel_in_the_ratio() -> None:
    """+-10 % steps applied to every backend in the same rounds: each absolute spread is far above 2 %, the paired
    ratios' spread stays near 0 and their medians are the true ratios."""
    ms = prefill()
    for m in ms.values():
        assert m.summary is not None and m.summary.rel_std > 0.02  # what the old judged spread saw
    for base, t in PREFILL_MS.items():
        if base == "flashcore":
            continue
        r = speed(ms, base)
        assert r.rel_std < 0.003, (base, r.rel_std)
        assert r.value == pytest.approx(t / PREFILL_MS["flashcore"], rel=0.005)
        assert r.clock_dependence == pytest.approx(0.0, abs=0.05)  # both clock-bound: nothing left to explain


def test_bursts_on_one_backend_in_some_rounds_fail_the_spread() -> None:
    """Interference during FlashCore's calls in rounds 30-54 only (a neighbour's job): pairing cannot cancel
    what hits one side, and the ratio's spread goes far above 2 %."""
    ms = prefill(burst=lambda r, key: 1.4 if key[1] == "flashcore" and 30 <= r < 55 else 1.0)
    r = speed(ms, "fa2")
    assert r.rel_std > 0.05
    assert r.value == pytest.approx(6.0 / 3.5, rel=0.01)  # the median still sits on the clean rounds
    # the planted noise of the selftest: bursts on FlashCore's calls from the middle of the rounds on
    noisy = speed(prefill(burst=lambda r, key: 1.4 if key[1] == "flashcore" and r >= 50 else 1.0), "fa2")
    assert noisy.rel_std > 0.1
    # on the baseline's side it shows the same way
    assert speed(prefill(burst=lambda r, key: 1.3 if key[1] == "cudnn" and 10 <= r < 40 else 1.0),
                 "cudnn").rel_std > 0.05


def test_bursts_hitting_every_backend_in_the_same_rounds_cancel() -> None:
    ms = prefill(burst=lambda r, key: 1.3 if 30 <= r < 55 else 1.0)
    assert speed(ms, "fa2").rel_std < 0.003


def test_per_call_jitter_is_absorbed_by_the_group_medians() -> None:
    r = speed(prefill(jitter_amount=0.05), "fa2")  # +-5 % per call, as under the power cap at ~600 TFLOPS
    assert r.summary.round_rel_std > 0.02 and r.rel_std < 0.02


def test_a_memory_bound_kernel_against_a_clock_bound_one_keeps_the_drift() -> None:
    """Decode: FlashCore reads DRAM at its roofline (elasticity 0), FA2's decode kernel scales with the clock
    (1). Their ratio moves with the clock, which pairing cannot cancel: the spread stays high; the clock
    diagnostic shows why (dependence -1, a small spread at a fixed clock)."""
    calls = {(DECODE, "flashcore"): 2.78, (DECODE, "fa2"): 3.18, (DECODE, "cudnn"): 2.77}
    ms = paired_rounds(calls, 100, elasticity={("decode", "flashcore"): 0.0, ("decode", "cudnn"): 0.0})
    fa2 = speed(ms, "fa2", "decode")
    assert fa2.rel_std > 0.02
    assert fa2.clock_dependence == pytest.approx(-1.0, abs=0.05)
    assert fa2.fixed_clock_rel_std is not None and fa2.fixed_clock_rel_std < 0.003
    assert fa2.clock_mhz is not None and fa2.clock_mhz[0] < 1850 < fa2.clock_mhz[2]
    assert speed(ms, "cudnn", "decode").rel_std < 0.003  # a memory-bound reference: clean


def test_throughput_ratio_between_sweep_points_of_the_same_rounds() -> None:
    """Scaling: FlashCore at S=32K and S=8K in the same rounds: TFLOPS(32K) / TFLOPS(8K), paired."""
    s8k, s32k = workload("s8k", b=4, hq=16, hkv=16, sq=8192, sk=8192, d=128), \
        workload("s32k", b=1, hq=16, hkv=16, sq=32768, sk=32768, d=128)
    ms = paired_rounds({(s8k, "flashcore"): 3.5, (s32k, "flashcore"): 15.0}, 60)
    r = paired.ratio(ms[("s32k", "flashcore")], ms[("s8k", "flashcore")])
    assert r is not None and r.num == "flashcore@s32k" and r.den == "flashcore@s8k"
    assert r.value == pytest.approx(4 * 3.5 / 15.0, rel=0.005)  # 4x the FLOPs in 15/3.5 the time
    assert r.rel_std < 0.003


# ---- what is paired, and what is not ------------------------------------------------------------------------


def test_only_measurements_of_the_same_rounds_pair() -> None:
    a, b = prefill(), prefill(rounds=40)
    ours = a[("prefill-d128", "flashcore")]
    assert paired.speed_ratio(ours, a[("prefill-d128", "fa2")]) is not None
    other = b[("prefill-d128", "fa2")]
    assert paired.speed_ratio(ours, dataclasses.replace(other, pairing="somewhere-else")) is None
    unpaired = dataclasses.replace(other, rounds=(), pairing="")
    assert not unpaired.paired and paired.speed_ratio(ours, unpaired) is None
    assert paired.unpaired_speed_ratio(ours, unpaired) == pytest.approx(
        (unpaired.median_ms or 0) / (ours.median_ms or 1))


def test_an_older_record_without_rounds_reads_back_unpaired() -> None:
    data = run_dict(prefill(rounds=20).values(), {"gpu": "H100"}, {}, "test")
    for m in data["measurements"]:
        m["schema"] = "flashcore.measurement/1"
        for key in ("rounds", "pairing", "clock_mhz", "clocks_start"):
            del m[key]
    run = parse_run(json.loads(json.dumps(data)), "old.json")
    ours, fa2 = run.get("prefill-d128", "flashcore"), run.get("prefill-d128", "fa2")
    assert ours is not None and fa2 is not None and ours.available and not ours.paired
    assert ours.summary is not None and paired.speed_ratio(ours, fa2) is None


def test_ratio_statistics() -> None:
    s = summarize_ratios([1.0, 1.0, 2.0, 2.0, 1.5, 1.5], groups=3)
    assert (s.rounds, s.median, s.groups) == (6, 1.5, 3) and s.rel_std == pytest.approx(0.5 / 1.5)
    with pytest.raises(ValueError, match="paired rounds"):
        summarize_ratios([1.0] * 9, groups=5)
    xs = list(range(10))
    assert theil_sen_slope(xs, [2 * x + 1 + (50 if x == 7 else 0) for x in xs]) == 2.0  # robust to an outlier
    assert theil_sen_slope([1, 1, 1], [1, 2, 3]) is None


def test_synthetic_clock_steps_are_shaped_like_the_h100s() -> None:
    factors = [clock_factor(r) for r in range(200)]
    assert max(factors) == pytest.approx(1.12) and min(factors) == 1.0  # 1980 MHz down to ~1770
    steps = [b / a - 1 for a, b in zip(factors, factors[1:], strict=False) if a != b]
    assert max(abs(x) for x in steps) <= 0.10 + 1e-9 and len(steps) >= 15
