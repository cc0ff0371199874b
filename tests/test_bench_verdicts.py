"""Perf and scaling verdicts (harness/support/perf_verdict.py) on SYNTHETIC paired measurements
(tests/fixtures/bench/synthesize.py: interleaved rounds under a drifting clock): pass, fail, the edges, noise
(not judged), decisive failures, and missing or unpaired data (ERROR, never a pass)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
from conftest import workload
from fixtures.bench.synthesize import paired_rounds

from harness.bench.record import Measurement, Run, not_available
from harness.results import Status
from harness.schema import Workload
from harness.support import perf_verdict as pv

PREFILL = workload("prefill-d128", b=4, hq=16, hkv=16, sq=8192, sk=8192, d=128)
GPU = "NVIDIA H100 80GB HBM3"
ENV = {"gpu": GPU, "torch": "2.11.0"}
Burst = Callable[[int, tuple[str, str]], float]


def pair(ours_ms: float, base_ms: float, base: str = "fa2", burst: Burst | None = None, rounds: int = 50,
         wl: Workload = PREFILL, **kw: object) -> tuple[Measurement, Measurement]:
    """FlashCore and `base` timed in the same rounds (times at the max clock; the clock drifts +-10 %)."""
    ms = paired_rounds({(wl, "flashcore"): ours_ms, (wl, base): base_ms}, rounds, burst=burst, **kw)  # type: ignore[arg-type]
    return ms[(wl.name, "flashcore")], ms[(wl.name, base)]


def on_ours(lo: int, hi: int, factor: float = 1.4) -> Burst:
    """Interference during FlashCore's calls in rounds lo..hi-1 only."""
    return lambda r, key: factor if key[1] == "flashcore" and lo <= r < hi else 1.0


# ---- spread of a paired ratio ------------------------------------------------------------------------------


def test_spread_passes_when_drift_is_shared_and_fails_on_one_sided_bursts() -> None:
    ours, fa2 = pair(4.0, 6.0)
    assert ours.summary is not None and ours.summary.rel_std > 0.02  # the absolute spread: drift
    check = pv.verdict_ratio_spread("w", ours, fa2, 0.02)
    assert (check.status, check.metric, check.comparison) == (Status.PASS, "rel_std[speed_vs_fa2]", "<=")
    assert check.measured is not None and check.measured < 0.003 and "50 paired rounds" in check.message
    noisy = pv.verdict_ratio_spread("w", *pair(4.0, 6.0, burst=on_ours(25, 50)), 0.02)
    assert noisy.status is Status.FAIL and noisy.margin is not None and noisy.margin < 0


def test_spread_exactly_at_the_limit_passes() -> None:
    ours, fa2 = pair(4.0, 6.0, burst=on_ours(10, 30, 1.02))
    limit = pv.verdict_ratio_spread("w", ours, fa2, 1.0).measured
    assert limit is not None and limit > 0
    assert pv.verdict_ratio_spread("w", ours, fa2, limit).status is Status.PASS
    assert pv.verdict_ratio_spread("w", ours, fa2, limit * 0.999).status is Status.FAIL


def test_spread_of_a_measurement_that_did_not_run_is_an_error() -> None:
    ours, _ = pair(4.0, 6.0)
    check = pv.verdict_ratio_spread("w", ours, not_available(PREFILL, "fa2", "No available kernel"), 0.02)
    assert check.status is Status.ERROR and "No available kernel" in check.message


def test_unpaired_measurements_give_no_ratio() -> None:
    ours, fa2 = pair(4.0, 6.0)
    older = dataclasses.replace(fa2, rounds=(), pairing="")  # a record from before pairing
    for check in (pv.verdict_ratio_spread("w", ours, older, 0.02), pv.verdict_ratio("w", ours, older, 1.0, 0.02)):
        assert check.status is Status.ERROR and "not timed in the same rounds" in check.message


# ---- speed ratio ----------------------------------------------------------------------------------------


def test_ratio_is_baseline_time_over_ours_per_round() -> None:
    check = pv.verdict_ratio("w", *pair(4.0, 6.0), 1.0, 0.02)
    assert (check.status, check.metric) == (Status.PASS, "speed_vs_fa2")
    assert check.measured == pytest.approx(1.5, rel=0.005)
    slower = pv.verdict_ratio("w", *pair(8.0, 6.0), 1.0, 0.02)
    assert slower.status is Status.FAIL and slower.measured == pytest.approx(0.75, rel=0.005)
    assert slower.margin == pytest.approx(-0.25, abs=0.005)


def test_ratio_edge_equal_speed_passes_at_one() -> None:
    equal = pair(5.0, 5.0, base="cudnn", jitter_amount=0.0)
    assert pv.verdict_ratio("w", *equal, 1.0, 0.02).status is Status.PASS
    below = pair(5.0001, 5.0, base="cudnn", jitter_amount=0.0)
    assert pv.verdict_ratio("w", *below, 1.0, 0.02).status is Status.FAIL


def test_ratio_against_a_missing_baseline_is_an_error_naming_why() -> None:
    gone = not_available(PREFILL, "fa3", "FA3 not importable: No module named 'fa3_fwd_interface'")
    check = pv.verdict_ratio("w", pair(4.0, 6.0)[0], gone, 1.0, 0.02)
    assert check.status is Status.ERROR
    assert "FA3 not available" in check.message and "fa3_fwd_interface" in check.message


def test_ratio_is_not_judged_when_its_spread_is_too_high() -> None:
    # FlashCore "wins" on the median, but a neighbour's bursts hit its calls in half the rounds: no verdict
    check = pv.verdict_ratio("w", *pair(4.0, 6.0, burst=on_ours(0, 25, 1.3)), 1.0, 0.02)
    assert check.status is Status.NOT_RUN and check.message == pv.NOT_JUDGED
    assert check.measured is not None  # still shown
    # a losing median is not a FAIL either when only some rounds lose
    check = pv.verdict_ratio("w", *pair(6.6, 6.0, burst=lambda r, k: 0.85 if k[1] == "flashcore" and r < 30
                                         else 1.0), 1.0, 0.02)
    assert check.status is Status.NOT_RUN


def test_a_failure_shown_by_nearly_every_round_is_a_fail_despite_the_spread() -> None:
    # 3x slower in every round, with a burst on top in some: the spread fails, and so does the ratio
    check = pv.verdict_ratio("w", *pair(12.0, 6.0, burst=on_ours(0, 20)), 1.0, 0.02)
    assert check.status is Status.FAIL and "80 % of the rounds fail on their own" in check.message
    # ... but never a PASS from noise: a clear win with the same spread stays not judged
    assert pv.verdict_ratio("w", *pair(2.0, 6.0, burst=on_ours(0, 20)), 1.0, 0.02).status is Status.NOT_RUN


# ---- regression against the stored run (relative to the reference backend) ------------------------------


# ---- geometric mean over workloads -------------------------------------------------------------------------


def test_geomean_of_paired_ratios_names_the_worst_workload() -> None:
    other = workload("prefill-d64", b=4, hq=16, hkv=16, sq=8192, sk=8192, d=64)
    pairs = [pair(4.0, 4.4, base="fa3"), pair(4.0, 3.6, base="fa3", wl=other)]  # 1.1x and 0.9x
    check = pv.verdict_geomean("all", pairs, 0.99, 0.02)
    assert (check.status, check.metric) == (Status.PASS, "geomean_speed_vs_fa3")
    assert check.measured == pytest.approx((1.1 * 0.9) ** 0.5, rel=0.005)
    assert "worst prefill-d64 0.9" in check.message
    assert pv.verdict_geomean("all", pairs, 1.0, 0.02).status is Status.FAIL


def test_geomean_without_every_workload_is_an_error() -> None:
    gone = not_available(PREFILL, "fa3", "FA3 not importable: No module named 'fa3_fwd_interface' (install it ...)")
    check = pv.verdict_geomean("all", [(pair(4.0, 6.0)[0], gone)], 0.95, 0.02)
    assert check.status is Status.ERROR and "install it" in check.message
    assert pv.verdict_geomean("all", [], 0.95, 0.02).status is Status.ERROR


def test_geomean_of_noisy_ratios_is_not_judged_unless_even_the_p80s_fail() -> None:
    noisy = pair(4.0, 6.0, base="fa3", burst=on_ours(0, 25, 1.3))
    assert pv.verdict_geomean("all", [noisy], 1.0, 0.02).status is Status.NOT_RUN
    slow = pair(12.0, 6.0, base="fa3", burst=on_ours(0, 20))  # 2x slower in every round, bursts on top
    assert pv.verdict_geomean("all", [slow], 1.0, 0.02).status is Status.FAIL


def stored_run(ours: Measurement, ref: Measurement, gpu: str = GPU, torch: str = "2.11.0") -> Run:
    return Run("stored.json", {"gpu": gpu, "git_commit": "abc", "torch": torch},
               {(m.workload, m.backend): m for m in (ours, ref)})


@pytest.mark.parametrize(("now", "status"), [(4.0, Status.PASS), (4.2, Status.PASS), (4.2 * 1.0001, Status.FAIL),
                                             (3.0, Status.PASS), (5.0, Status.FAIL)])
def test_regression_margin(now: float, status: Status) -> None:
    stored = stored_run(*pair(4.0, 6.0, jitter_amount=0.0))
    ours, fa2 = pair(now, 6.0, jitter_amount=0.0, rounds=40)
    got = pv.stored_pair(stored, ours, fa2, ENV)
    check = pv.verdict_regression("w", ours, fa2, got, 0.05, 0.02)
    assert check.status is status, check
    assert check.metric == "slowdown_vs_stored" and check.threshold == pytest.approx(1.05)
    assert check.measured == pytest.approx(now / 4.0, rel=1e-6)


def test_regression_compares_ratios_so_a_slower_clock_today_is_not_a_regression() -> None:
    stored = stored_run(*pair(4.0, 6.0))
    ours, fa2 = pair(4.0 * 1.15, 6.0 * 1.15)  # today the whole GPU runs 15 % slower: both sides alike
    got = pv.stored_pair(stored, ours, fa2, ENV)
    check = pv.verdict_regression("w", ours, fa2, got, 0.05, 0.02)
    assert check.status is Status.PASS and check.measured == pytest.approx(1.0, abs=0.005)
    assert ours.median_ms is not None and stored.get("prefill-d128", "flashcore").median_ms is not None  # type: ignore[union-attr]


def test_no_stored_run_fails_closed() -> None:
    ours, fa2 = pair(4.0, 6.0)
    got = pv.stored_pair(None, ours, fa2, ENV)
    check = pv.verdict_regression("w", ours, fa2, got, 0.05, 0.02)
    assert isinstance(got, pv.Missing) and check.status is Status.ERROR
    assert check.message == "no stored baseline: run make bench-baseline"


def _unpaired(m: Measurement) -> Measurement:
    return dataclasses.replace(m, rounds=(), pairing="")


def _other(ours: Measurement, fa2: Measurement, **change: object) -> tuple[Measurement, Measurement]:
    return ours, dataclasses.replace(fa2, **change)  # type: ignore[arg-type]


STORED_OURS, STORED_FA2 = pair(4.0, 6.0)


@pytest.mark.parametrize(("run", "fragment"), [
    (stored_run(dataclasses.replace(STORED_OURS, spec=workload("prefill-d128", sq=4096, sk=4096)), STORED_FA2),
     "changed shape"),
    (stored_run(not_available(PREFILL, "flashcore", "crashed"), STORED_FA2), "has no time"),
    (stored_run(STORED_OURS, not_available(PREFILL, "fa2", "refused")), "no FA2 (SDPA flash) time"),
    (stored_run(_unpaired(STORED_OURS), _unpaired(STORED_FA2)), "not timed in the same rounds"),
    (stored_run(*_other(STORED_OURS, STORED_FA2, implementation="SDPBackend.EFFICIENT_ATTENTION")),
     "reference changed: re-store the baseline"),
    (stored_run(*_other(STORED_OURS, STORED_FA2, kernels=("flash_fwd_kernel_v1",))), "kernels"),
    (stored_run(STORED_OURS, STORED_FA2, torch="2.9.0"), "torch 2.9.0 -> 2.11.0"),
])
def test_unusable_stored_run_is_an_error(run: Run, fragment: str) -> None:
    ours, fa2 = pair(4.0, 6.0)
    got = pv.stored_pair(run, ours, fa2, ENV)
    check = pv.verdict_regression("w", ours, fa2, got, 0.05, 0.02)
    assert isinstance(got, pv.Missing) and check.status is Status.ERROR and fragment in check.message, check.message
    assert "make bench-baseline" in check.message or "has no time" in check.message


def test_reference_missing_today_is_an_error() -> None:
    ours, _ = pair(4.0, 6.0)
    gone = not_available(PREFILL, "fa2", "No available kernel")
    check = pv.verdict_regression("w", ours, gone, None, 0.05, 0.02)
    assert check.status is Status.ERROR and "regression reference" in check.message


def test_noisy_run_is_not_compared_with_the_stored_run_unless_every_round_is_slower() -> None:
    stored = stored_run(*pair(4.0, 6.0))
    ours, fa2 = pair(4.1, 6.0, burst=on_ours(0, 25, 1.3))  # 2.5 % slower, bursts in half the rounds: not judged
    got = pv.stored_pair(stored, ours, fa2, ENV)
    assert pv.verdict_regression("w", ours, fa2, got, 0.05, 0.02).status is Status.NOT_RUN
    ours, fa2 = pair(4.4, 6.0, burst=on_ours(0, 25, 1.3))  # 10 % slower in the rounds without bursts too
    got = pv.stored_pair(stored, ours, fa2, ENV)
    assert pv.verdict_regression("w", ours, fa2, got, 0.05, 0.02).status is Status.FAIL
    slow, fa2 = pair(4.0 * 17, 6.0, burst=on_ours(0, 25, 1.3))  # the planted slow path: 17x, noisy too
    got = pv.stored_pair(stored, slow, fa2, ENV)
    check = pv.verdict_regression("w", slow, fa2, got, 0.05, 0.02)
    assert check.status is Status.FAIL and check.measured is not None and check.measured > 10


# ---- scaling ---------------------------------------------------------------------------------------------


def sweep(tflops: dict[int, float], burst: Burst | None = None) -> dict[int, Measurement]:
    """FlashCore at each S (32K tokens per batch), all in the same rounds; `tflops` at the max clock."""
    wls = {s: workload(f"s{s}", b=32768 // s, hq=16, hkv=16, sq=s, sk=s, d=128) for s in tflops}
    calls = {(wls[s], "flashcore"): 4 * wls[s].batch * 16 * s * s * 128 / (t * 1e9) for s, t in tflops.items()}
    ms = paired_rounds(calls, 40, burst=burst)
    return {s: ms[(f"s{s}", "flashcore")] for s in tflops}


def test_flat_scaling_passes_and_a_collapse_fails() -> None:
    flat = sweep({2048: 600, 4096: 640, 8192: 650, 16384: 640, 32768: 620})
    check = pv.verdict_scaling("sweep", flat, [2048, 4096, 8192], 32768, 0.9, 0.02)
    assert check.status is Status.PASS and check.measured == pytest.approx(620 / 650, rel=0.005)
    assert "S=32768 / at S=8192 (the peak)" in check.message
    spread = pv.verdict_scaling_spread("sweep", flat, [2048, 4096, 8192], 32768, 0.02)
    assert spread.status is Status.PASS and spread.metric == "rel_std[tflops_s32768_vs_peak]"
    collapse = sweep({2048: 600, 4096: 640, 8192: 650, 16384: 560, 32768: 500})
    check = pv.verdict_scaling("sweep", collapse, [2048, 4096, 8192], 32768, 0.9, 0.02)
    assert check.status is Status.FAIL and check.measured == pytest.approx(500 / 650, rel=0.005)


def test_scaling_edge_at_the_threshold() -> None:
    at = sweep({8192: 600, 32768: 540.5})
    assert pv.verdict_scaling("s", at, [8192], 32768, 0.9, 0.02).status is Status.PASS
    below = sweep({8192: 600, 32768: 539.5})
    assert pv.verdict_scaling("s", below, [8192], 32768, 0.9, 0.02).status is Status.FAIL


def test_scaling_without_a_point_unpaired_or_with_noise_gives_no_verdict() -> None:
    missing = sweep({2048: 600, 4096: 640})
    missing[8192] = not_available(workload("s8192"), "flashcore", "crashed while timed")
    check = pv.verdict_scaling("s", missing, [2048, 4096, 8192], 32768, 0.9, 0.02)
    assert check.status is Status.ERROR
    assert "S=8192: crashed" in check.message and "S=32768: not measured" in check.message
    apart = sweep({8192: 600, 32768: 600})
    apart[32768] = dataclasses.replace(apart[32768], pairing="another run")  # timed seconds apart
    assert "not timed in the same rounds" in pv.verdict_scaling("s", apart, [8192], 32768, 0.9, 0.02).message
    noisy = sweep({8192: 600, 32768: 600}, burst=lambda r, k: 1.4 if k[0] == "s32768" and r >= 20 else 1.0)
    assert pv.verdict_scaling_spread("s", noisy, [8192], 32768, 0.02).status is Status.FAIL
    assert pv.verdict_scaling("s", noisy, [8192], 32768, 0.9, 0.02).status is Status.NOT_RUN


def _slower_clock_on(m: Measurement, factor: Callable[[int], float]) -> Measurement:
    """m's calls ran at a clock `factor(round)` times lower than the round's other calls (and took that longer)."""
    f = [factor(r) for r in m.rounds]
    return dataclasses.replace(m, times_ms=tuple(t * g for t, g in zip(m.times_ms, f, strict=True)),
                               clock_mhz=tuple(c / g for c, g in zip(m.clock_mhz, f, strict=True)))


def test_per_clock_scaling_removes_a_clock_the_two_calls_did_not_share() -> None:
    pts = sweep({8192: 650, 32768: 620})
    # the long call of every other group of 8 rounds ran at a 10 % lower clock than the short one (power cap)
    pts[32768] = _slower_clock_on(pts[32768], lambda r: 1.1 if (r // 8) % 2 else 1.0)
    assert pv.verdict_scaling_spread("s", pts, [8192], 32768, 0.02).status is Status.FAIL  # per second: noise
    spread = pv.verdict_scaling_spread("s", pts, [8192], 32768, 0.02, per_clock=True)
    assert spread.status is Status.PASS and spread.measured is not None and spread.measured < 0.005
    check = pv.verdict_scaling("s", pts, [8192], 32768, 0.9, 0.02, per_clock=True)
    assert check.status is Status.PASS and check.measured == pytest.approx(620 / 650, rel=0.005)
    assert "per clock cycle" in check.message and "per second" in check.message
    # a collapse still fails per cycle: 30 % more cycles at 32K
    slow = sweep({8192: 650, 32768: 455})
    assert pv.verdict_scaling("s", slow, [8192], 32768, 0.9, 0.02, per_clock=True).status is Status.FAIL


def test_per_clock_scaling_without_clock_readings_is_an_error() -> None:
    pts = sweep({8192: 650, 32768: 620})
    pts[32768] = dataclasses.replace(pts[32768], clock_mhz=())
    check = pv.verdict_scaling("s", pts, [8192], 32768, 0.9, 0.02, per_clock=True)
    assert check.status is Status.ERROR and "clock_probe_us" in check.message
    assert pv.verdict_scaling("s", pts, [8192], 32768, 0.9, 0.02).status is Status.PASS  # per second still works
