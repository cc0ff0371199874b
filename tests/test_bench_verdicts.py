"""Perf and scaling verdicts (harness/gates/perf_verdict.py) on synthetic measurements: pass, fail, the edges,
noise (not judged) and missing data (ERROR, never a pass)."""

from __future__ import annotations

import pytest
from conftest import workload

from harness.bench.record import Measurement, Run, not_available
from harness.gates import perf_verdict as pv
from harness.results import Status

PREFILL = workload("prefill-d128", b=4, hq=16, hkv=16, sq=8192, sk=8192, d=128)
GPU = "NVIDIA H100 80GB HBM3"


def timed(median: float, spread: float = 0.0, backend: str = "flashcore", wl: str = "prefill-d128",
          n: int = 21) -> Measurement:
    """`n` repetitions symmetric around `median`: half at median*(1-spread), half at median*(1+spread)."""
    half = n // 2
    times = (median * (1 - spread),) * half + (median,) * (n - 2 * half) + (median * (1 + spread),) * half
    spec = PREFILL if wl == PREFILL.name else workload(wl, b=4, hq=16, hkv=16, sq=8192, sk=8192, d=128)
    return Measurement(wl, backend, spec, True, times_ms=times)


# ---- spread -------------------------------------------------------------------------------------------


def test_spread_passes_under_the_limit_and_fails_over_it() -> None:
    calm, noisy = timed(4.0, spread=0.005), timed(4.0, spread=0.05)
    assert pv.verdict_spread("w", calm, 0.02).status is Status.PASS
    check = pv.verdict_spread("w", noisy, 0.02)
    assert (check.status, check.metric, check.comparison) == (Status.FAIL, "rel_std[flashcore]", "<=")
    assert check.measured == pytest.approx(0.05, rel=0.05) and check.margin is not None and check.margin < 0


def test_spread_exactly_at_the_limit_passes() -> None:
    m = timed(4.0, spread=0.02)
    limit = m.summary.rel_std if m.summary else 0.0
    assert pv.verdict_spread("w", m, limit).status is Status.PASS
    assert pv.verdict_spread("w", m, limit * 0.999).status is Status.FAIL


def test_spread_of_a_measurement_that_did_not_run_is_an_error() -> None:
    check = pv.verdict_spread("w", not_available(PREFILL, "fa2", "No available kernel"), 0.02)
    assert check.status is Status.ERROR and "No available kernel" in check.message


# ---- speed ratio ----------------------------------------------------------------------------------------


def test_ratio_is_baseline_time_over_ours() -> None:
    ours, fa2 = timed(4.0), timed(6.0, backend="fa2")
    check = pv.verdict_ratio("w", ours, fa2, 1.0, 0.02)
    assert (check.status, check.metric, check.measured) == (Status.PASS, "speed_vs_fa2", pytest.approx(1.5))
    slower = pv.verdict_ratio("w", timed(8.0), fa2, 1.0, 0.02)
    assert slower.status is Status.FAIL and slower.measured == pytest.approx(0.75)
    assert slower.margin == pytest.approx(-0.25)


def test_ratio_edge_equal_speed_passes_at_one() -> None:
    assert pv.verdict_ratio("w", timed(5.0), timed(5.0, backend="cudnn"), 1.0, 0.02).status is Status.PASS
    assert pv.verdict_ratio("w", timed(5.0001), timed(5.0, backend="cudnn"), 1.0, 0.02).status is Status.FAIL


def test_ratio_against_a_missing_baseline_is_an_error_naming_why() -> None:
    gone = not_available(PREFILL, "fa3", "FA3 not importable: No module named 'fa3_fwd_interface'")
    check = pv.verdict_ratio("w", timed(4.0), gone, 1.0, 0.02)
    assert check.status is Status.ERROR
    assert "FA3 not available" in check.message and "fa3_fwd_interface" in check.message


def test_ratio_is_not_judged_when_either_spread_is_too_high() -> None:
    # FlashCore would "win" on these medians, but its repetitions spread 5 %: no verdict from noise
    check = pv.verdict_ratio("w", timed(4.0, spread=0.05), timed(6.0, backend="fa2"), 1.0, 0.02)
    assert check.status is Status.NOT_RUN and check.message == pv.NOT_JUDGED
    assert check.measured == pytest.approx(1.5)  # still shown
    check = pv.verdict_ratio("w", timed(8.0), timed(6.0, spread=0.05, backend="fa2"), 1.0, 0.02)
    assert check.status is Status.NOT_RUN  # a losing ratio is not a FAIL either when the baseline is noisy


# ---- regression against the stored run ---------------------------------------------------------------------


def stored_run(*ms: Measurement, gpu: str = GPU) -> Run:
    return Run("stored.json", {"gpu": gpu, "git_commit": "abc"}, {(m.workload, m.backend): m for m in ms})


@pytest.mark.parametrize(("now", "status"), [(4.0, Status.PASS), (4.2, Status.PASS), (4.2 + 1e-9, Status.FAIL),
                                             (3.0, Status.PASS), (5.0, Status.FAIL)])
def test_regression_margin(now: float, status: Status) -> None:
    stored = timed(4.0)
    ours = timed(now)
    ref, why = pv.stored_measurement(stored_run(stored), ours, GPU)
    check = pv.verdict_regression("w", ours, ref, why, 0.05, 0.02)
    assert check.status is status, check
    assert check.metric == "slowdown_vs_stored" and check.threshold == pytest.approx(1.05)
    assert check.measured == pytest.approx(now / 4.0)


def test_no_stored_run_fails_closed() -> None:
    ref, why = pv.stored_measurement(None, timed(4.0), GPU)
    check = pv.verdict_regression("w", timed(4.0), ref, why, 0.05, 0.02)
    assert ref is None and check.status is Status.ERROR
    assert check.message == "no stored baseline: run make bench-baseline"


@pytest.mark.parametrize(("run", "fragment"), [
    (stored_run(timed(4.0), gpu="NVIDIA A100-SXM4-80GB"), "measured on NVIDIA A100"),
    (stored_run(timed(4.0, wl="other")), "prefill-d128 is not in the stored run"),
    (stored_run(Measurement("prefill-d128", "flashcore", workload("prefill-d128", sq=4096, sk=4096), True,
                            times_ms=(4.0, 4.0))), "changed shape"),
    (stored_run(not_available(PREFILL, "flashcore", "crashed")), "has no time"),
])
def test_unusable_stored_run_is_an_error(run: Run, fragment: str) -> None:
    ours = timed(4.0)
    ref, why = pv.stored_measurement(run, ours, GPU)
    check = pv.verdict_regression("w", ours, ref, why, 0.05, 0.02)
    assert ref is None and check.status is Status.ERROR and fragment in check.message
    assert "make bench-baseline" in check.message or "has no time" in check.message


def test_noisy_run_is_not_compared_with_the_stored_run() -> None:
    ours = timed(6.0, spread=0.05)  # 50 % slower, but noisy: the spread check fails instead
    ref, why = pv.stored_measurement(stored_run(timed(4.0)), ours, GPU)
    assert pv.verdict_regression("w", ours, ref, why, 0.05, 0.02).status is Status.NOT_RUN


# ---- scaling ---------------------------------------------------------------------------------------------


def sweep(tflops: dict[int, float], spread: float = 0.0) -> dict[int, Measurement]:
    out = {}
    for s, t in tflops.items():
        wl = workload(f"s{s}", b=32768 // s, hq=16, hkv=16, sq=s, sk=s, d=128)
        flop = 4 * wl.batch * 16 * s * s * 128
        out[s] = Measurement(wl.name, "flashcore", wl, True, times_ms=timed(flop / (t * 1e9), spread).times_ms)
    return out


def test_flat_scaling_passes_and_a_collapse_fails() -> None:
    flat = sweep({2048: 600, 4096: 640, 8192: 650, 16384: 640, 32768: 620})
    check = pv.verdict_scaling("sweep", flat, [2048, 4096, 8192], 32768, 0.9, 0.02)
    assert check.status is Status.PASS and check.measured == pytest.approx(620 / 650)
    assert "peak 650 at S=8192" in check.message
    collapse = sweep({2048: 600, 4096: 640, 8192: 650, 16384: 560, 32768: 500})
    check = pv.verdict_scaling("sweep", collapse, [2048, 4096, 8192], 32768, 0.9, 0.02)
    assert check.status is Status.FAIL and check.measured == pytest.approx(500 / 650)


def test_scaling_edge_at_the_threshold() -> None:
    assert pv.verdict_scaling("s", sweep({8192: 600, 32768: 540}), [8192], 32768, 0.9, 0.02).status is Status.PASS
    assert pv.verdict_scaling("s", sweep({8192: 600, 32768: 539.9}), [8192], 32768, 0.9, 0.02).status is Status.FAIL


def test_scaling_without_a_point_or_with_noise_gives_no_verdict() -> None:
    missing = sweep({2048: 600, 4096: 640})
    missing[8192] = not_available(workload("s8192"), "flashcore", "crashed while timed")
    check = pv.verdict_scaling("s", missing, [2048, 4096, 8192], 32768, 0.9, 0.02)
    assert check.status is Status.ERROR
    assert "S=8192: crashed" in check.message and "S=32768: not measured" in check.message
    noisy = sweep({8192: 600, 32768: 300}, spread=0.1)
    assert pv.verdict_scaling("s", noisy, [8192], 32768, 0.9, 0.02).status is Status.NOT_RUN
