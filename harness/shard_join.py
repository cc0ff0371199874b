"""The parts of a perf-group gate (harness/shard_perf.py) as one result, judged as a run on one GPU judges it.

harness/shard.py first joins the parts as any split gate (every check, the worst status, the details' lists
concatenated). A per-workload check does not depend on which part timed it, so that stands. What spans workloads is
drawn here, once, from every part's measurements (their logs/<gate>.bench.json, the per-round times a check reads):
- the geometric mean over the gate's `workloads`, by the same function (perf.geomean_checks) on the same
  measurements; a part that ran nothing it could record, or whose measurements cannot be read, makes it an ERROR
  naming the part, never a mean over fewer workloads;
- the charts, over every part's workloads;
- checks every part made alike (a gate's own precondition, e.g. autotune-gain's table) once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.bench import report
from harness.bench.record import Measurement, RecordError, read_run
from harness.bench.settings import OURS
from harness.gates.base import summarize
from harness.gates.perf import PerfParams, gate_backends, geomean_checks, perf_plots, references
from harness.results import Check, GateResult, Status, combine
from harness.schema import Config
from harness.shard_perf import bench_settings

Part = tuple[int, GateResult]  # (GPU, that part's result)
GEOMEAN_KEY = "geomean_workloads"  # a part's details: the gate's `workloads` it judged (perf.run_perf)


def measurements(run_dir: Path, parts: Sequence[Part]) -> dict[str, dict[str, Measurement]] | str:
    """workload -> backend -> measurement, from every part's bench.json; or why they cannot be read."""
    by_wl: dict[str, dict[str, Measurement]] = {}
    for n, (gpu, r) in enumerate(parts, 1):
        # a part's logs are compressed when its worker finishes (harness/run_files.py): .bench.json.xz then
        files = [x for x in r.logs if x.endswith((".bench.json", ".bench.json.xz"))]
        if not files and r.checks:
            return f"part {n} of {len(parts)} (GPU {gpu}) wrote no measurements file"
        for rel in files:
            try:
                run = read_run(run_dir / rel)
            except RecordError as e:
                return f"part {n} of {len(parts)} (GPU {gpu}): {e}"
            for (w, b), m in run.measurements.items():
                by_wl.setdefault(w, {})[b] = m
    return by_wl


def union_geomean(p: PerfParams, parts: Sequence[Part], by_wl: dict[str, dict[str, Measurement]] | str,
                  rules: Any) -> list[Check]:
    """The geometric-mean checks over every part's judged workloads, or one ERROR per gated baseline saying why
    there is none. No part recorded any (each stopped before judging, as a lone run would): none."""
    if p.min_geomean <= 0:
        return []
    recorded = [(gpu, r) for gpu, r in parts if GEOMEAN_KEY in (r.details or {})]
    if not recorded:
        return []
    lost = [f"part {n} of {len(parts)} (GPU {gpu}): {r.message}" for n, (gpu, r) in enumerate(parts, 1)
            if GEOMEAN_KEY not in (r.details or {}) and (not r.checks or r.status in (Status.ERROR, Status.NOT_RUN))]
    names = list(dict.fromkeys(w for _, r in recorded for w in r.details[GEOMEAN_KEY]))
    missing = [] if isinstance(by_wl, str) else [
        f"{w}/{b}" for w in names for b in (OURS, *p.gated) if b not in by_wl.get(w, {})]
    why = "; ".join(lost) or (by_wl if isinstance(by_wl, str) else "") or (
        f"no part measured {', '.join(missing)}" if missing else "")
    if why:
        return [Check(f"geomean over {len(names)} workloads", f"geomean_speed_vs_{b}", p.min_geomean, None,
                      Status.ERROR, ">=", message=f"no geometric mean without every part's measurements: {why}")
                for b in p.gated]
    assert not isinstance(by_wl, str)
    return geomean_checks(p, names, by_wl, rules)


def joined_details(whole: GateResult, parts: Sequence[Part]) -> dict[str, Any]:
    """The joined details, corrected where a perf gate's are not per workload: settings every part records alike
    (timing, the stored run, the sweep: mappings; gated, peak_seqlens: equal lists) once, as the first part has
    them, never summed or repeated; the ceiling's per-workload fractions from every part (each part measured its
    own GPU's ceiling)."""
    details = dict(whole.details or {})
    got = [r.details or {} for _, r in parts]
    for key, value in got[0].items():
        if isinstance(value, dict) or (isinstance(value, list) and all(d.get(key) == value for d in got)):
            details[key] = value
    ceilings = [d["ceiling"] for d in got if isinstance(d.get("ceiling"), dict)]
    if ceilings:
        fraction = {k: v for c in ceilings for k, v in (c.get("fraction") or {}).items()}
        details["ceiling"] = {**ceilings[0], "fraction": fraction}
    return details


def join(config: Config, run_dir: Path, whole: GateResult, parts: Sequence[Part]) -> GateResult:
    """`whole` (the parts joined as any split gate) with the checks and charts that span the parts redrawn."""
    spec = next((g for ph in config.phases for g in ph.gates if g.name == whole.name), None)
    if spec is None:
        return whole
    settings = bench_settings(config)
    p = spec.params
    by_wl = measurements(run_dir, parts)
    checks = list(dict.fromkeys(whole.checks))  # a check every part made alike, once
    details = joined_details(whole, parts)
    order = {w.name: i for i, w in enumerate(p.measured(config, settings))}
    rows = details.get("workloads")
    if isinstance(rows, list):
        details["workloads"] = sorted(rows, key=lambda t: order.get(str(t.get("name")), len(order)))
    if isinstance(p, PerfParams):
        checks += union_geomean(p, parts, by_wl, settings.judged)
        if not isinstance(by_wl, str) and "plots" in details:
            judged, _ = p.judged_and_shown(config, settings)
            refs = references(settings, judged) if p.regression else {}
            names = [w for w in sorted(by_wl, key=lambda w: order.get(w, len(order))) if w in order]
            details["plots"] = perf_plots(spec.name, p, settings, names, by_wl, gate_backends(p, refs))
    elif not isinstance(by_wl, str) and "plots" in details:  # scaling: the TFLOPS-vs-S chart over both modes
        svg, note = report.seqlen_chart(settings.sweep_workloads, by_wl, [OURS, *p.baselines], f"{spec.name}-seqlen")
        details["plots"] = {"seqlen_svg": svg, "seqlen_note": note}
    status = combine([whole.status, *(c.status for c in checks)])  # a part that could not run stays in it
    message = summarize(checks) if checks and all(r.checks for _, r in parts) else whole.message
    return dataclasses.replace(whole, checks=tuple(checks), status=status, message=message, details=details)
