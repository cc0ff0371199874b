"""Perf gates: FlashCore's speed against the baselines, its spread, and a regression check.

`perf-fa2` (phase 3) and `perf-cudnn` (phase 4) are the same gate with different YAML: per workload
(and, with `sweep: true`, every point of the scaling sweep of gates/bench.yaml) it times FlashCore and each
listed baseline (harness/bench, timing settings from gates/bench.yaml) and checks:
- rel_std[b] <= max_rel_std for FlashCore and each gated baseline (the spread of the repetitions);
- speed_vs_<b> >= min_ratio for each gated baseline (baseline time / FlashCore time), judged only when both
  spreads passed; a gated baseline that cannot run here is an ERROR (no verdict), never a pass;
- with `regression: true`, slowdown_vs_stored <= 1 + regression_margin against the committed stored run
  (gates/bench.yaml `stored_run.file`, written by `make bench-baseline`). No stored run (or one from another
  GPU, or without this workload) is an ERROR, "no stored baseline: run make bench-baseline": fail closed.
The other baselines (FA3 always) are measured and reported, not judged. Verdicts: harness/gates/perf_verdict.py.
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.bench import report
from harness.bench.record import Measurement, RecordError, Run, not_available, read_run, run_dict
from harness.bench.settings import BASELINES, OURS, BenchSettings, check_backends, load_bench_settings, timing_dict
from harness.config import PHASES_FILE, ConfigError, Workload, param
from harness.gates import gpu
from harness.gates import perf_verdict as pv
from harness.gates.base import Gate, GateContext
from harness.gates.registry import register
from harness.results import Check, GateResult, Status

if TYPE_CHECKING:  # the runner imports harness.gates.gpu, whose package imports this module: import it late
    from harness.bench.runner import Measurer


@dataclass(frozen=True)
class PerfParams:
    workloads: tuple[str, ...] = param(workloads=True)
    sweep: bool = param()  # also every point of the scaling sweep (gates/bench.yaml): the TFLOPS-vs-S chart
    baselines: tuple[str, ...] = param()  # measured and reported (fa2, cudnn, efficient, fa3)
    gated: tuple[str, ...] = param()  # baselines whose speed FlashCore must reach
    min_ratio: float = param(gt=0)  # baseline time / FlashCore time >= this, per gated baseline
    max_rel_std: float = param(gt=0)  # relative std of the repetitions (0.02 = 2 %)
    regression: bool = param()  # compare with the stored run (one perf gate per phase suffices)
    regression_margin: float = param(ge=0)  # fail when slower than the stored run by more than this (0.05 = 5 %)


def load_stored(settings: BenchSettings, repo_root: Path, override: Path | None = None) -> tuple[Run | None, str]:
    """The stored run, or (None, why): a missing file is the fail-closed "no stored baseline" case."""
    path = override if override is not None else repo_root / settings.stored_run.file
    if not path.is_file():
        return None, f"{pv.NO_STORED_RUN} ({settings.stored_run.file} does not exist)"
    try:
        return read_run(path), ""
    except RecordError as e:
        return None, f"stored run unreadable: {e}: run make bench-baseline"


def measure_all(ctx: GateContext, measurer: Measurer, workloads: Sequence[Workload],
                backends: Sequence[str]) -> dict[str, dict[str, Measurement]]:
    """Every (workload, backend); a crash while timing becomes that pair's "not available" (with its log)."""
    out: dict[str, dict[str, Measurement]] = {}
    for i, wl in enumerate(workloads):
        out[wl.name] = {}
        for b in backends:
            ctx.step(f"{wl.name} {b} ({i + 1}/{len(workloads)})")
            try:
                m = measurer.measure(wl, b)
            except Exception as e:  # noqa: BLE001 - one pair's crash is that pair's result
                ctx.log(f"{wl.name} {b} ({wl.label}):\n{traceback.format_exc()}")
                m = not_available(wl, b, f"crashed while timed: {type(e).__name__}: {e}", measurer.seed(wl))
            out[wl.name][b] = m
            s = m.summary
            ctx.log(f"{wl.name} {b}: " + (f"median {s.median_ms:.4g} ms, {m.throughput:.4g} {m.unit}, rel std "
                                           f"{100 * s.rel_std:.2f} % over {s.reps} reps, clocks {dict(m.clocks)}"
                                           if s else f"not available: {m.why}"))
    return out


def write_measurements(ctx: GateContext, settings: BenchSettings, by_wl: dict[str, dict[str, Measurement]]) -> str:
    """logs/<gate>.bench.json: this gate's measurements in the stored-run format (usable as one)."""
    from harness import env

    rel = f"logs/{ctx.spec.name}.bench.json"
    items = [m for ms in by_wl.values() for m in ms.values()]
    data = run_dict(items, env.collect(ctx.repo_root), timing_dict(settings.timing), f"gate {ctx.spec.name}")
    (ctx.run_dir / rel).parent.mkdir(parents=True, exist_ok=True)
    (ctx.run_dir / rel).write_text(json.dumps(data, indent=1) + "\n")
    return rel


def perf_checks(wl: Workload, ms: dict[str, Measurement], p: PerfParams, stored: Run | None, stored_why: str,
                gpu_name: str | None) -> list[Check]:
    ours = ms[OURS]
    checks = [pv.verdict_spread(wl.name, ours, p.max_rel_std)]
    for b in p.gated:
        if ms[b].available:
            checks.append(pv.verdict_spread(wl.name, ms[b], p.max_rel_std))
        checks.append(pv.verdict_ratio(wl.name, ours, ms[b], p.min_ratio, p.max_rel_std))
    if p.regression:
        ref, why = pv.stored_measurement(stored, ours, gpu_name) if ours.available else (None, "")
        checks.append(pv.verdict_regression(wl.name, ours, ref, why or stored_why, p.regression_margin,
                                            p.max_rel_std))
    return checks


def _gpu_name() -> str | None:
    import torch

    return str(torch.cuda.get_device_name(0)) if torch.cuda.is_available() else None


def run_perf(ctx: GateContext, *, noisy: bool = False, stored_path: Path | None = None) -> GateResult:
    """The gate; `noisy` (test-only) adds side-stream noise, `stored_path` replaces the stored run (selftest)."""
    reason = gpu.cuda_unavailable_reason()
    if reason is not None:
        return ctx.verdict_only(Status.NOT_RUN, reason)
    p: PerfParams = ctx.params
    key = f"phases.{ctx.spec.phase}.gates.{ctx.spec.name}"
    try:
        settings = load_bench_settings(ctx.config)
        check_backends(ctx.config.gates_dir / PHASES_FILE, f"{key}.baselines", p.baselines, BASELINES)
        check_backends(ctx.config.gates_dir / PHASES_FILE, f"{key}.gated", p.gated, BASELINES)
        gpu.load_flashcore(0)
    except (ConfigError, gpu.FlashcoreUnavailable) as e:
        return ctx.verdict_only(Status.ERROR, str(e))
    workloads = list({w.name: w for w in (*ctx.workloads(), *(settings.sweep_workloads if p.sweep else ()))}.values())
    backends = [OURS, *dict.fromkeys((*p.gated, *p.baselines))]
    from harness.bench.runner import Options, shared

    stored, stored_why = load_stored(settings, ctx.repo_root, stored_path) if p.regression else (None, "")
    measurer = shared(ctx.run_dir, Options(settings.timing, ctx.seed, ctx.fault, noisy))
    by_wl = measure_all(ctx, measurer, workloads, backends)
    measurer.release()  # free the inputs and the flush buffer for the next gate; the results stay cached
    gpu_name = _gpu_name()
    checks = [c for wl in workloads for c in perf_checks(wl, by_wl[wl.name], p, stored, stored_why, gpu_name)]
    log_json = write_measurements(ctx, settings, by_wl)
    details = perf_details(ctx, settings, workloads, backends, by_wl, stored, stored_why, log_json)
    return ctx.result(checks, details=details, logs=[log_json])


def perf_details(ctx: GateContext, settings: BenchSettings, workloads: Sequence[Workload], backends: Sequence[str],
                 by_wl: dict[str, dict[str, Measurement]], stored: Run | None, stored_why: str,
                 log_json: str) -> dict[str, Any]:
    p: PerfParams = ctx.params
    names = [w.name for w in workloads]
    baselines = [b for b in backends if b != OURS]
    ratio_svg, ratio_note = report.ratio_chart(
        names, by_wl, ["fa3", *[b for b in baselines if b != "fa3"]] if "fa3" in baselines else baselines,
        f"FlashCore speed / baseline speed (gated: {', '.join(p.gated)} >= {p.min_ratio:g})",
        p.min_ratio, f"{ctx.spec.name}-ratio")
    sweep = [w for w in settings.sweep_workloads if w.name in by_wl]
    seq_svg, seq_note = report.seqlen_chart(sweep, by_wl, backends, f"{ctx.spec.name}-seqlen") if sweep \
        else (None, "the sweep is not part of this gate (sweep: false)")
    return {
        "base_seed": ctx.seed,
        "gated": list(p.gated),
        "min_ratio": p.min_ratio,
        "max_rel_std": p.max_rel_std,
        "regression": p.regression,
        "regression_margin": p.regression_margin,
        "timing": timing_dict(settings.timing),
        "stored_run": {"file": settings.stored_run.file, "found": stored is not None, "why": stored_why,
                       "gpu": stored.gpu if stored else None, "commit": stored.commit if stored else None,
                       "created": stored.environment.get("utc_time") if stored else None} if p.regression else None,
        "workloads": [report.workload_table(w, [by_wl[w.name][b] for b in backends], settings.anchor_for(w))
                      for w in workloads],
        "not_available": report.not_available(m for ms in by_wl.values() for m in ms.values()),
        "plots": {"ratio_svg": ratio_svg, "ratio_note": ratio_note, "seqlen_svg": seq_svg, "seqlen_note": seq_note},
        "measurements_file": log_json,
        "planted": sorted({m.planted for ms in by_wl.values() for m in ms.values() if m.planted}),
    }


class PerfGate(Gate):
    Params = PerfParams
    needs_gpu = True

    def run(self, ctx: GateContext) -> GateResult:
        return run_perf(ctx)


@register("perf-fa2")
class PerfFa2Gate(PerfGate):
    """Phase 3: at least as fast as FA2 (torch SDPA's flash backend)."""


@register("perf-cudnn")
class PerfCudnnGate(PerfGate):
    """Phase 4: at least as fast as cuDNN (torch SDPA's cuDNN backend)."""
