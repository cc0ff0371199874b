"""Verdicts of the perf and scaling gates: pure functions over measurements and YAML thresholds.

Every judged number is a paired ratio (harness/bench/paired.py): two measurements timed in the same interleaved
rounds, their per-round ratio, its median (the value) and its run-to-run spread (relative std of the medians
of spread_groups consecutive groups of rounds). Clock drift moves both sides of a pair alike and cancels;
interference that hits one side does not, and shows in the spread. Absolute times and TFLOPS are reported,
with their own drift-sensitive spread, and never judged.

Order of trust: a ratio's spread is judged first. Above the limit the spread check FAILs and the checks that
would use that ratio are NOT_RUN ("not judged"): a noisy run fails on its noise and never yields a verdict
from noise. One exception, which can only fail: when at least 80 % of the rounds fail the threshold on their
own (the p80 of the per-round ratios is past it), the check FAILs: a failure that nearly every round shows
is not noise (a planted 17x slower kernel must fail the regression check even if its ratio spreads 3 %).
A baseline that could not run, measurements that were not timed in the same rounds (an older record), a ratio
resting on fewer rounds or spread groups than gates/bench.yaml `judged` asks (today's or the stored run's), a
broken stored run or a changed reference give no verdict either: ERROR, never a pass. A stored run of another GPU
model, one that records no GPU, or none for this GPU: the comparison does not arise here (NOT_APPLICABLE, with the
reason; never a pass), while the paired ratios against the baselines still judge.

Speed ratio = baseline time / FlashCore time, per round (> 1: FlashCore is faster; equals the ratio of
throughputs on the same workload). Regression: FlashCore's speed relative to a reference backend (torch's, not
ours) in the stored run against the same ratio today; slowdown = stored ratio / today's (> 1: slower).
Scaling: FlashCore's TFLOPS at a long S / at a peak S, per round of the same sweep.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from harness.bench import paired
from harness.bench.paired import PairedRatio
from harness.bench.record import Measurement, Run
from harness.bench.settings import BACKENDS, JudgedParams
from harness.bench.stored import PREPARE, model_of
from harness.results import Check, Status
from harness.schema import Workload

NOT_JUDGED = "not judged: a spread above the limit makes this number noise (see the rel_std checks)"
DECISIVE = ("its spread is above the limit, but at least 80 % of the rounds fail on their own: a failure, "
            "not noise")
NO_STORED_RUN = "no stored baseline: run make bench-baseline"
RESTORE = "re-store the baseline: run make bench-baseline"
UNPAIRED = "not timed in the same rounds (an unpaired, older record): no paired ratio"


def _pct(x: float) -> str:
    return f"{100 * x:.2f} %"


def _label(backend: str) -> str:
    return BACKENDS.get(backend, backend)


def spread_metric(ratio_metric: str) -> str:
    return f"rel_std[{ratio_metric}]"


def ratio_detail(r: PairedRatio) -> str:
    """p20-p80, rounds, the per-round jitter and the clock diagnostic of a paired ratio (for messages)."""
    s = r.summary
    text = (f"median of {s.rounds} paired rounds, p20-p80 {s.p20:.4g}-{s.p80:.4g}, per-round jitter "
            f"{_pct(s.round_rel_std)}")
    if r.clock_mhz is not None:
        text += f", SM clock {r.clock_mhz[0]:.0f}-{r.clock_mhz[2]:.0f} MHz"
    if r.clock_dependence is not None and r.fixed_clock_rel_std is not None:
        text += (f"; clock dependence {r.clock_dependence:+.2f} (spread at a fixed clock "
                 f"{_pct(r.fixed_clock_rel_std)}, shown, not judged)")
    return text


def too_little(r: PairedRatio, min_rounds: int, min_groups: int, whose: str = "") -> str | None:
    """Why `r` is too thin to judge (fewer rounds or spread groups than asked), or None."""
    s = r.summary
    if s.rounds >= min_rounds and s.groups >= min_groups:
        return None
    return (f"{whose}paired ratio rests on {s.rounds} rounds in {s.groups} spread group{'s' if s.groups != 1 else ''}"
            f" (at least {min_rounds} in {min_groups} needed, gates/bench.yaml judged): no verdict from so little")


def _missing(subject: str, metric: str, threshold: float, comparison: str, ours: Measurement,
             base: Measurement, judged: JudgedParams | None = None) -> Check | None:
    """ERROR when either side did not run, the two were not timed in the same rounds, or (`judged`) their ratio
    rests on too few rounds."""
    if not ours.available:
        return Check(subject, metric, threshold, None, Status.ERROR, comparison,
                     message=f"FlashCore did not run: {ours.why}")
    if not base.available:
        return Check(subject, metric, threshold, None, Status.ERROR, comparison,
                     message=f"{_label(base.backend)} not available: {base.why}: no verdict against it")
    r = paired.speed_ratio(ours, base)
    if r is None:
        return Check(subject, metric, threshold, None, Status.ERROR, comparison,
                     message=f"FlashCore and {_label(base.backend)} {UNPAIRED}")
    thin = too_little(r, judged.min_rounds, judged.min_spread_groups) if judged is not None else None
    if thin is not None:
        return Check(subject, metric, threshold, None, Status.ERROR, comparison, message=thin)
    return None


def spread_limit(wl: Workload, max_rel_std: float, long_context_max_rel_std: float) -> float:
    """The spread limit for `wl`: `long_context_max_rel_std` on workloads of kind long-context when set (> 0; calls
    of 50-500 ms, within which the power cap moves the SM clock: gates/phases.yaml), else `max_rel_std`."""
    if wl.kind == "long-context" and long_context_max_rel_std > 0:
        return long_context_max_rel_std
    return max_rel_std


def verdict_ratio_spread(subject: str, ours: Measurement, base: Measurement, max_rel_std: float,
                         judged: JudgedParams | None = None) -> Check:
    """The run-to-run spread of FlashCore's paired speed ratio to `base` <= max_rel_std."""
    metric = spread_metric(f"speed_vs_{base.backend}")
    missing = _missing(subject, metric, max_rel_std, "<=", ours, base, judged)
    r = paired.speed_ratio(ours, base)
    if missing is not None or r is None:
        return missing or Check(subject, metric, max_rel_std, None, Status.ERROR, "<=", message=UNPAIRED)
    ok = r.rel_std <= max_rel_std
    return Check(subject, metric, max_rel_std, r.rel_std, Status.PASS if ok else Status.FAIL, "<=",
                 margin=max_rel_std - r.rel_std, message=f"{_pct(r.rel_std)} run to run; {ratio_detail(r)}")


def _noisy(subject: str, metric: str, threshold: float, r: PairedRatio, measured: float, decisive: bool,
           comparison: str = ">=") -> Check:
    """A ratio whose spread is above the limit: NOT_RUN, or FAIL when 80 % of its rounds fail on their own."""
    if not decisive:
        return Check(subject, metric, threshold, measured, Status.NOT_RUN, comparison, message=NOT_JUDGED)
    margin = threshold - measured if comparison == "<=" else measured - threshold
    return Check(subject, metric, threshold, measured, Status.FAIL, comparison, margin=margin,
                 message=f"{measured:.4g}: {DECISIVE} ({ratio_detail(r)})")


def spread_ok(ours: Measurement, base: Measurement, max_rel_std: float) -> bool:
    r = paired.speed_ratio(ours, base)
    return r is not None and r.rel_std <= max_rel_std


def verdict_ratio(subject: str, ours: Measurement, base: Measurement, min_ratio: float, max_rel_std: float,
                  judged: JudgedParams | None = None) -> Check:
    """FlashCore at least `min_ratio` times as fast as `base` (paired); not judged when its spread is too high."""
    metric = f"speed_vs_{base.backend}"
    missing = _missing(subject, metric, min_ratio, ">=", ours, base, judged)
    r = paired.speed_ratio(ours, base)
    if missing is not None or r is None:
        return missing or Check(subject, metric, min_ratio, None, Status.ERROR, ">=", message=UNPAIRED)
    if r.rel_std > max_rel_std:
        return _noisy(subject, metric, min_ratio, r, r.value, r.summary.p80 < min_ratio)
    ok = r.value >= min_ratio
    return Check(subject, metric, min_ratio, r.value, Status.PASS if ok else Status.FAIL, ">=",
                 margin=r.value - min_ratio,
                 message=f"{_label(base.backend)} time / FlashCore's, paired: {r.value:.4g} ({ratio_detail(r)}); "
                 f"medians {ours.median_ms:.4g} vs {base.median_ms:.4g} ms, {ours.throughput:.4g} vs "
                 f"{base.throughput:.4g} {ours.unit} (absolute: drift with the clock, not judged)")


def verdict_geomean(subject: str, pairs: Sequence[tuple[Measurement, Measurement]], min_geomean: float,
                    max_rel_std: float, judged: JudgedParams | None = None) -> Check:
    """The geometric mean over workloads of FlashCore's paired speed ratio to one baseline >= min_geomean; the
    message names the worst workload. Every pair must be available and paired (else ERROR, naming them) and every
    ratio's spread within the limit (else not judged, unless even the geomean of the ratios' p80s fails)."""
    backend = pairs[0][1].backend if pairs else "?"
    metric = f"geomean_speed_vs_{backend}"
    if not pairs:
        return Check(subject, metric, min_geomean, None, Status.ERROR, ">=", message="no workload to average")
    ratios: list[tuple[str, PairedRatio]] = []
    missing: list[str] = []
    for ours, base in pairs:
        gap = _missing(ours.workload, metric, min_geomean, ">=", ours, base, judged)
        r = paired.speed_ratio(ours, base)
        if gap is not None or r is None:
            missing.append(f"{ours.workload} ({gap.message if gap else UNPAIRED})")
        else:
            ratios.append((ours.workload, r))
    if missing:
        return Check(subject, metric, min_geomean, None, Status.ERROR, ">=",
                     message=f"no geometric mean without every workload: {'; '.join(missing)}")
    value = math.exp(sum(math.log(r.value) for _, r in ratios) / len(ratios))
    worst_name, worst = min(ratios, key=lambda x: x[1].value)
    text = (f"{value:.4g} over {len(ratios)} workloads ({_label(backend)} time / FlashCore's, paired medians); "
            f"worst {worst_name} {worst.value:.4g}, best {max(r.value for _, r in ratios):.4g}")
    noisy = [name for name, r in ratios if r.rel_std > max_rel_std]
    if noisy:
        p80 = math.exp(sum(math.log(r.summary.p80) for _, r in ratios) / len(ratios))
        if p80 >= min_geomean:
            return Check(subject, metric, min_geomean, value, Status.NOT_RUN, ">=",
                         message=f"{NOT_JUDGED} ({', '.join(noisy)}); {text}")
        return Check(subject, metric, min_geomean, value, Status.FAIL, ">=", margin=value - min_geomean,
                     message=f"{text}: even the geometric mean of the ratios' p80s ({p80:.4g}) fails")
    ok = value >= min_geomean
    return Check(subject, metric, min_geomean, value, Status.PASS if ok else Status.FAIL, ">=",
                 margin=value - min_geomean, message=text)


# ---- regression against the stored run --------------------------------------------------------------------


@dataclass(frozen=True)
class Missing:
    """Why there is no stored pair to compare with: ERROR (a broken or changed stored run) or NOT_APPLICABLE (no
    stored run of this GPU model: the question does not arise here)."""

    why: str
    status: Status = Status.ERROR


@dataclass(frozen=True)
class StoredPair:
    """FlashCore and the reference backend of one workload in the stored run."""

    ours: Measurement
    ref: Measurement
    torch: str | None


def _kernels_differ(a: Measurement, b: Measurement) -> bool:
    return bool(a.kernels) and bool(b.kernels) and tuple(a.kernels) != tuple(b.kernels)


def stored_gpu_gap(stored: Run, env_now: Mapping[str, object]) -> Missing | None:
    """NOT_APPLICABLE when the stored run is not of this run's GPU model (name and SM count), records no GPU, or
    today's GPU is unknown: a ratio stored on another GPU says nothing about this one, and a silent pass on an
    unknown GPU would be one."""
    then, now = model_of(stored.environment), model_of(env_now)
    if then is None:
        return Missing(f"the stored run {stored.path} records no GPU: not comparable; {PREPARE}",
                       Status.NOT_APPLICABLE)
    if now is None:
        return Missing("this run's GPU is unknown: no stored run is comparable", Status.NOT_APPLICABLE)
    if not then.same(now):
        return Missing(f"the stored run {stored.path} was measured on {then.label}, this run is on {now.label}: "
                       f"{PREPARE}", Status.NOT_APPLICABLE)
    return None


def stored_pair(stored: Run | Missing | None, ours: Measurement, ref_now: Measurement,
                env_now: Mapping[str, object]) -> StoredPair | Missing:
    """The stored FlashCore and reference measurements to compare today's pair with, or why there are none.
    `env_now`: today's "gpu", "gpu_sm_count" and "torch"."""
    if stored is None:
        return Missing(NO_STORED_RUN)
    if isinstance(stored, Missing):
        return stored
    gap = stored_gpu_gap(stored, env_now)
    if gap is not None:
        return gap
    m = stored.get(ours.workload, ours.backend)
    if m is None:
        return Missing(f"{ours.workload} is not in the stored run {stored.path}: run make bench-baseline (with it "
                       "in gates/bench.yaml suite) and commit the file", Status.NOT_APPLICABLE)
    if m.spec != ours.spec:
        return Missing(f"{ours.workload} changed shape since the stored run ({m.spec.label} -> {ours.spec.label}):"
                       " run make bench-baseline")
    if m.median_ms is None:
        return Missing(f"the stored run has no time for {ours.workload}: {m.why or 'not measured'}")
    label = _label(ref_now.backend)
    ref = stored.get(ours.workload, ref_now.backend)
    if ref is None or not ref.available:
        why = ref.why if ref is not None else "not in the stored run"
        return Missing(f"the stored run has no {label} time for {ours.workload} ({why}): {RESTORE}")
    if paired.speed_ratio(m, ref) is None:
        return Missing(f"the stored run's FlashCore and {label} on {ours.workload} were {UNPAIRED}: {RESTORE}")
    torch_then = stored.environment.get("torch")
    torch_now = env_now.get("torch")
    changed = []
    if ref.implementation != ref_now.implementation:
        changed.append(f"implementation {ref.implementation!r} -> {ref_now.implementation!r}")
    if _kernels_differ(ref, ref_now):
        changed.append(f"kernels {', '.join(ref.kernels)} -> {', '.join(ref_now.kernels)}")
    if torch_then != torch_now:
        changed.append(f"torch {torch_then} -> {torch_now}")
    if changed:
        return Missing(f"reference changed: {RESTORE} ({label} on {ours.workload}: {'; '.join(changed)})")
    return StoredPair(m, ref, str(torch_then) if torch_then else None)


def verdict_regression(subject: str, ours: Measurement, ref_now: Measurement, stored: StoredPair | Missing | None,
                       margin: float, max_rel_std: float, judged: JudgedParams | None = None) -> Check:
    """FlashCore's speed relative to the reference, today against the stored run: no more than `margin` slower
    (0.05 = 5 %); fail closed without a usable stored run, NOT_APPLICABLE without one of this GPU model."""
    threshold = 1.0 + margin
    metric = "slowdown_vs_stored"
    missing = _missing(subject, metric, threshold, "<=", ours, ref_now, judged)
    now = paired.speed_ratio(ours, ref_now)
    if missing is not None or now is None:
        if missing is not None and ours.available and not ref_now.available:
            missing = Check(subject, metric, threshold, None, Status.ERROR, "<=",
                            message=f"{_label(ref_now.backend)} (the regression reference) not available: "
                            f"{ref_now.why}")
        return missing or Check(subject, metric, threshold, None, Status.ERROR, "<=", message=UNPAIRED)
    if not isinstance(stored, StoredPair):
        gap = stored or Missing(NO_STORED_RUN)
        return Check(subject, metric, threshold, None, gap.status, "<=", message=gap.why)
    then = paired.speed_ratio(stored.ours, stored.ref)
    if then is None:
        return Check(subject, metric, threshold, None, Status.ERROR, "<=", message=f"stored run {UNPAIRED}")
    thin = too_little(then, judged.stored_min_rounds, judged.stored_min_spread_groups, "the stored run's ") \
        if judged is not None else None
    if thin is not None:
        return Check(subject, metric, threshold, None, Status.ERROR, "<=", message=f"{thin}: {RESTORE}")
    slowdown = then.value / now.value
    if now.rel_std > max_rel_std:  # decisive: slower than the threshold in 80 % of today's rounds
        return _noisy(subject, metric, threshold, now, slowdown, now.summary.p80 < then.value / threshold, "<=")
    if then.rel_std > max_rel_std:
        return Check(subject, metric, threshold, slowdown, Status.ERROR, "<=",
                     message=f"the stored ratio spreads {_pct(then.rel_std)} (> {_pct(max_rel_std)}): {RESTORE}")
    ok = slowdown <= threshold
    label = _label(ref_now.backend)
    return Check(subject, metric, threshold, slowdown, Status.PASS if ok else Status.FAIL, "<=",
                 margin=threshold - slowdown,
                 message=f"FlashCore {now.value:.4g}x {label}'s speed now vs {then.value:.4g}x stored "
                 f"(slowdown {100 * (slowdown - 1):+.1f} %; limit +{100 * margin:.1f} %); paired in each run, "
                 f"spread now {_pct(now.rel_std)}, stored {_pct(then.rel_std)}")


# ---- scaling ---------------------------------------------------------------------------------------------


NO_CLOCKS = ("have no SM clock readings (gates/bench.yaml timing.clock_probe_us is 0?): a per-clock ratio needs "
             "them")


def scaling_ratio(points: Mapping[int, Measurement], peak_seqlens: Sequence[int], seqlen: int,
                  per_clock: bool = False) -> tuple[int, PairedRatio] | tuple[None, str]:
    """(peak S, TFLOPS(seqlen) / TFLOPS(peak S) paired) where the peak S is the one FlashCore was fastest at,
    relative to `seqlen`; or (None, why). `per_clock`: TFLOPS per SM clock cycle (paired.ratio)."""
    needed = [*peak_seqlens, seqlen]
    missing = [s for s in needed if s not in points or not points[s].available]
    if missing:
        return None, "; ".join(f"S={s}: {points[s].why if s in points else 'not measured'}" for s in missing)
    ratios = {s: paired.ratio(points[seqlen], points[s], per_clock) for s in peak_seqlens}
    found = {s: r for s, r in ratios.items() if r is not None}
    if len(found) < len(ratios):
        lost = ", ".join(str(s) for s in ratios if s not in found)
        if per_clock and all(paired.ratio(points[seqlen], points[s]) is not None for s in ratios):
            return None, f"S={seqlen} and S={lost} {NO_CLOCKS}"
        return None, f"S={seqlen} and S={lost} {UNPAIRED}"
    peak_s = min(found, key=lambda s: found[s].value)  # the lowest ratio: the S where FlashCore was fastest
    return peak_s, found[peak_s]


def _thin_scaling(got: PairedRatio | str, judged: JudgedParams | None) -> PairedRatio | str:
    if isinstance(got, str) or judged is None:
        return got
    return too_little(got, judged.min_rounds, judged.min_spread_groups) or got


def verdict_scaling_spread(subject: str, points: Mapping[int, Measurement], peak_seqlens: Sequence[int],
                           seqlen: int, max_rel_std: float, per_clock: bool = False,
                           judged: JudgedParams | None = None) -> Check:
    """The run-to-run spread of the paired TFLOPS(seqlen) / TFLOPS(peak) <= max_rel_std."""
    metric = spread_metric(f"tflops_s{seqlen}_vs_peak")
    peak_s, got = scaling_ratio(points, peak_seqlens, seqlen, per_clock)
    got = _thin_scaling(got, judged)
    if peak_s is None or isinstance(got, str):
        return Check(subject, metric, max_rel_std, None, Status.ERROR, "<=", message=f"no verdict: {got}")
    ok = got.rel_std <= max_rel_std
    return Check(subject, metric, max_rel_std, got.rel_std, Status.PASS if ok else Status.FAIL, "<=",
                 margin=max_rel_std - got.rel_std,
                 message=f"{_pct(got.rel_std)} run to run (S={seqlen} vs S={peak_s}); {ratio_detail(got)}")


def verdict_scaling(subject: str, points: Mapping[int, Measurement], peak_seqlens: Sequence[int], seqlen: int,
                    min_ratio: float, max_rel_std: float, per_clock: bool = False,
                    judged: JudgedParams | None = None) -> Check:
    """FlashCore's TFLOPS at `seqlen` >= min_ratio x its best TFLOPS over `peak_seqlens`, per round of the same
    sweep (paired; per SM clock cycle with `per_clock`); not judged when that ratio's spread is too high."""
    metric = f"tflops_s{seqlen}_vs_peak"
    peak_s, got = scaling_ratio(points, peak_seqlens, seqlen, per_clock)
    got = _thin_scaling(got, judged)
    if peak_s is None or isinstance(got, str):
        return Check(subject, metric, min_ratio, None, Status.ERROR, ">=", message=f"no verdict: {got}")
    if got.rel_std > max_rel_std:
        return _noisy(subject, metric, min_ratio, got, got.value, got.summary.p80 < min_ratio)
    ok = got.value >= min_ratio
    long, peak = points[seqlen].tflops, points[peak_s].tflops
    return Check(subject, metric, min_ratio, got.value, Status.PASS if ok else Status.FAIL, ">=",
                 margin=got.value - min_ratio,
                 message=f"TFLOPS{' per clock cycle' if per_clock else ''} at S={seqlen} / at S={peak_s} (the peak), "
                 f"paired: {got.value:.4g} ({ratio_detail(got)}){_per_second(points, seqlen, peak_s, per_clock)}; "
                 f"medians {long:.4g} vs {peak:.4g} TFLOPS (absolute, not judged)")


def _per_second(points: Mapping[int, Measurement], seqlen: int, peak_s: int, per_clock: bool) -> str:
    """Beside a per-clock verdict: the same pair per second, drift included (shown, not judged)."""
    raw = paired.ratio(points[seqlen], points[peak_s]) if per_clock else None
    return "" if raw is None else f"; per second {raw.value:.4g} (spread {_pct(raw.rel_std)}, clock drift in it)"
