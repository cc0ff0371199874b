"""Verdicts of the perf and scaling gates: pure functions over measurements and YAML thresholds.

Order of trust: a measurement's spread is judged first. When FlashCore's or a judged baseline's relative
standard deviation is above the limit, the spread check FAILs and the speed checks that would use those
numbers are NOT_RUN ("not judged"): a noisy run fails on its noise and never yields a verdict from noise.
A baseline that could not run, or a missing stored run, gives no verdict either: ERROR, never a pass.

Speed ratio = baseline median time / FlashCore median time (> 1: FlashCore is faster; equals the ratio of
throughputs on the same workload). Slowdown = FlashCore median / stored FlashCore median (> 1: slower).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from harness.bench.record import Measurement, Run
from harness.bench.settings import BACKENDS
from harness.results import Check, Status

NOT_JUDGED = "not judged: a spread above the limit makes this number noise (see the rel_std checks)"
NO_STORED_RUN = "no stored baseline: run make bench-baseline"


def _pct(x: float) -> str:
    return f"{100 * x:.2f} %"


def spread_ok(m: Measurement, max_rel_std: float) -> bool:
    s = m.summary
    return s is not None and s.rel_std <= max_rel_std


def verdict_spread(subject: str, m: Measurement, max_rel_std: float) -> Check:
    """Relative std of the repetitions <= max_rel_std. A measurement that did not run is an ERROR."""
    metric = f"rel_std[{m.backend}]"
    s = m.summary
    if s is None:
        why = m.why or "fewer than 2 repetitions"
        return Check(subject, metric, max_rel_std, None, Status.ERROR, "<=",
                     message=f"{BACKENDS.get(m.backend, m.backend)} not measured: {why}")
    ok = s.rel_std <= max_rel_std
    return Check(subject, metric, max_rel_std, s.rel_std, Status.PASS if ok else Status.FAIL, "<=",
                 margin=max_rel_std - s.rel_std,
                 message=f"{_pct(s.rel_std)} over {s.reps} reps (p20-p80 {s.p20_ms:.4g}-{s.p80_ms:.4g} ms,"
                 f" median {s.median_ms:.4g} ms)")


def speed_ratio(ours: Measurement, base: Measurement) -> float | None:
    """Baseline time / FlashCore time at the medians; None when either did not run."""
    o, b = ours.median_ms, base.median_ms
    return b / o if o is not None and b is not None else None


def verdict_ratio(subject: str, ours: Measurement, base: Measurement, min_ratio: float, max_rel_std: float) -> Check:
    """FlashCore at least `min_ratio` times as fast as `base`; not judged when either spread is too high."""
    metric = f"speed_vs_{base.backend}"
    label = BACKENDS.get(base.backend, base.backend)
    if not ours.available:
        return Check(subject, metric, min_ratio, None, Status.ERROR, ">=",
                     message=f"FlashCore did not run: {ours.why}")
    if not base.available:
        return Check(subject, metric, min_ratio, None, Status.ERROR, ">=",
                     message=f"{label} not available: {base.why}: no verdict against it")
    ratio = speed_ratio(ours, base)
    if ratio is None or not (spread_ok(ours, max_rel_std) and spread_ok(base, max_rel_std)):
        return Check(subject, metric, min_ratio, ratio, Status.NOT_RUN, ">=", message=NOT_JUDGED)
    ok = ratio >= min_ratio
    return Check(subject, metric, min_ratio, ratio, Status.PASS if ok else Status.FAIL, ">=",
                 margin=ratio - min_ratio,
                 message=f"FlashCore {ours.median_ms:.4g} ms vs {label} {base.median_ms:.4g} ms"
                 f" ({ours.throughput:.4g} vs {base.throughput:.4g} {ours.unit})")


def stored_measurement(stored: Run | None, ours: Measurement, gpu: str | None) -> tuple[Measurement | None, str]:
    """The stored FlashCore measurement to compare `ours` with, or why there is none."""
    if stored is None:
        return None, NO_STORED_RUN
    if stored.gpu and gpu and stored.gpu != gpu:
        return None, (f"the stored run was measured on {stored.gpu}, this run is on {gpu}: "
                      "run make bench-baseline on this GPU")
    m = stored.get(ours.workload, ours.backend)
    if m is None:
        return None, f"{ours.workload} is not in the stored run {stored.path}: run make bench-baseline"
    if m.spec != ours.spec:
        return None, (f"{ours.workload} changed shape since the stored run ({m.spec.label} -> {ours.spec.label}):"
                      " run make bench-baseline")
    if m.median_ms is None:
        return None, f"the stored run has no time for {ours.workload}: {m.why or 'not measured'}"
    return m, ""


def verdict_regression(subject: str, ours: Measurement, stored: Measurement | None, missing_why: str,
                       margin: float, max_rel_std: float) -> Check:
    """FlashCore no slower than the stored run by more than `margin` (0.05 = 5 %); fail closed without one."""
    threshold = 1.0 + margin
    if not ours.available:
        return Check(subject, "slowdown_vs_stored", threshold, None, Status.ERROR, "<=",
                     message=f"FlashCore did not run: {ours.why}")
    if stored is None or stored.median_ms is None:
        return Check(subject, "slowdown_vs_stored", threshold, None, Status.ERROR, "<=",
                     message=missing_why or NO_STORED_RUN)
    now = ours.median_ms
    slowdown = now / stored.median_ms if now is not None else None
    if slowdown is None or not spread_ok(ours, max_rel_std):
        return Check(subject, "slowdown_vs_stored", threshold, slowdown, Status.NOT_RUN, "<=", message=NOT_JUDGED)
    ok = slowdown <= threshold
    return Check(subject, "slowdown_vs_stored", threshold, slowdown, Status.PASS if ok else Status.FAIL, "<=",
                 margin=threshold - slowdown,
                 message=f"{now:.4g} ms now vs {stored.median_ms:.4g} ms stored"
                 f" ({100 * (slowdown - 1):+.1f} %; limit +{100 * margin:.1f} %)")


def verdict_scaling(subject: str, points: Mapping[int, Measurement], peak_seqlens: Sequence[int], seqlen: int,
                    min_ratio: float, max_rel_std: float) -> Check:
    """TFLOPS at `seqlen` >= min_ratio x the best TFLOPS over `peak_seqlens` (no collapse at long context)."""
    metric = f"tflops_s{seqlen}_vs_peak"
    needed = [*peak_seqlens, seqlen]
    missing = [s for s in needed if s not in points or not points[s].available]
    if missing:
        why = "; ".join(f"S={s}: {points[s].why if s in points else 'not measured'}" for s in missing)
        return Check(subject, metric, min_ratio, None, Status.ERROR, ">=", message=f"no verdict: {why}")
    peak_s = max(peak_seqlens, key=lambda s: points[s].tflops or 0.0)
    peak, long = points[peak_s].tflops, points[seqlen].tflops
    if peak is None or long is None or not all(spread_ok(points[s], max_rel_std) for s in needed):
        ratio = long / peak if peak and long is not None else None
        return Check(subject, metric, min_ratio, ratio, Status.NOT_RUN, ">=", message=NOT_JUDGED)
    ratio = long / peak
    ok = ratio >= min_ratio
    return Check(subject, metric, min_ratio, ratio, Status.PASS if ok else Status.FAIL, ">=",
                 margin=ratio - min_ratio,
                 message=f"{long:.4g} TFLOPS at S={seqlen} vs peak {peak:.4g} at S={peak_s}")
