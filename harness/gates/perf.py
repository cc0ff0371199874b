"""Perf gates: FlashCore's speed against the baselines, its spread, and a regression check.

`perf-fa2` (phase 3), `perf-cudnn` and `perf-fa3` (phase 4) are the same gate with different YAML: per workload
(and, with `sweep: true`, every point of the scaling sweep of gates/bench.yaml) it times FlashCore and each
listed baseline in interleaved rounds (harness/bench, timing settings from gates/bench.yaml: every backend of a
workload in the same rounds, so clock drift hits them alike) and checks, per gated baseline b:
- rel_std[speed_vs_<b>] <= max_rel_std: the run-to-run spread of the paired ratio (b time / FlashCore time, per
  round); on workloads of kind long-context, `long_context_max_rel_std` when set (see phases.yaml for why);
- speed_vs_<b> >= min_ratio: the median of those per-round ratios, judged only when its spread passed; a gated
  baseline that cannot run here is an ERROR (no verdict), never a pass;
- with `regression: true`, slowdown_vs_stored <= 1 + regression_margin: FlashCore's paired speed relative to the
  reference backend (gates/bench.yaml `stored_run.reference_*`, measured here too) against the same ratio in
  the committed stored run of this GPU model (`stored_run.files`, written by `make bench-baseline`), judged when
  today's ratio spread (rel_std[speed_vs_<ref>], checked too) passed. No stored run of this GPU model (or a workload
  it lacks) is NOT_APPLICABLE with the reason, said once in the run's notice (`make prepare`); a broken one, or one
  whose reference changed (other implementation, kernels or torch), is an ERROR: fail closed;
- with `min_geomean` > 0, per gated baseline: the geometric mean of the paired ratios over `workloads` (the
  sweep's points excluded) >= min_geomean, the worst workload named (perf_verdict.verdict_geomean).
`report_workloads` are measured with the same backends and shown, never judged (e.g. batch-1 long context).
Absolute medians and TFLOPS, with their drift-sensitive spread and the SM clocks, are reported, not judged;
the other baselines (FA3 always) are measured and reported. Verdicts: harness/support/perf_verdict.py.
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness import shard_perf
from harness.bench import report, selection
from harness.bench import stored as per_gpu
from harness.bench.ceiling import KINDS as CEILINGS
from harness.bench.extend import Watch
from harness.bench.record import CRASHED, Measurement, Run, not_available, run_dict
from harness.bench.settings import (
    BASELINES,
    BENCH_FILE,
    OURS,
    BenchSettings,
    JudgedParams,
    check_backends,
    load_bench_settings,
    timing_dict,
)
from harness.gates.base import Gate, GateContext, SelfTest
from harness.gates.registry import register
from harness.results import Check, GateResult, Status
from harness.schema import PHASES_FILE, Config, ConfigError, Workload, param
from harness.support import gpu
from harness.support import perf_verdict as pv
from harness.support.notices import NOTICE_KEY
from harness.support.perf_stored import load_stored, stored_notice

if TYPE_CHECKING:  # the runner imports harness.support.gpu, whose package imports this module: import it late
    from harness.bench.runner import Measurer, Options


@dataclass(frozen=True)
class PerfParams:
    workloads: tuple[str, ...] = param(workloads=True, serving=True)  # serving ones: flashcore and fa3 only
    sweep: bool = param()  # also every point of the scaling sweep (gates/bench.yaml): the TFLOPS-vs-S chart
    baselines: tuple[str, ...] = param()  # measured and reported (fa2, cudnn, efficient, fa3)
    gated: tuple[str, ...] = param()  # baselines whose speed FlashCore must reach
    min_ratio: float = param(gt=0)  # baseline time / FlashCore time (paired) >= this, per gated baseline
    max_rel_std: float = param(gt=0)  # run-to-run relative std of each judged paired ratio (0.02 = 2 %)
    regression: bool = param()  # compare with the stored run (one perf gate per phase suffices)
    regression_margin: float = param(ge=0)  # fail when slower relative to the reference by more than this (0.05)
    # per gated baseline, the geometric mean of the paired ratios over `workloads` (not the sweep) >= this; 0: off
    min_geomean: float = param(default=0.0, ge=0)
    # measured and shown beside the judged ones (same backends, same rounds per workload), never judged
    report_workloads: tuple[str, ...] = param(default=(), workloads=True, serving=True)
    # the spread limit for workloads of kind long-context (calls of 50-500 ms under the power cap); 0: max_rel_std
    long_context_max_rel_std: float = param(default=0.0, ge=0)
    # the chip's matmul rate measured in the same run (harness/bench/ceiling.py), shown as FlashCore's fraction of
    # it per workload, never judged; "": none
    ceiling: str = param(default="", choices=("", *CEILINGS))
    ceiling_n: int = param(default=8192, gt=0)

    def spread_limit(self, wl: Workload) -> float:
        return pv.spread_limit(wl, self.max_rel_std, self.long_context_max_rel_std)

    def judged_and_shown(self, config: Config, settings: BenchSettings) -> tuple[list[Workload], list[Workload]]:
        """(`workloads` and the sweep's points unless shown only: judged; `report_workloads` not judged: shown)."""
        shown = set(self.report_workloads)  # a sweep point named here is shown, not judged
        swept = [w for w in settings.sweep_workloads if w.name not in shown] if self.sweep else []
        judged = list({w.name: w for w in (*(config.workloads[n] for n in self.workloads), *swept)}.values())
        names = {w.name for w in judged}
        return judged, [config.workloads[n] for n in self.report_workloads if n not in names]

    def measured(self, config: Config, settings: BenchSettings) -> list[Workload]:
        """Every workload the gate times (harness/shard_perf.py deals them to the parts of a run)."""
        return [w for ws in self.judged_and_shown(config, settings) for w in ws]

    def reads(self, config: Config, settings: BenchSettings) -> set[tuple[str, str]]:
        """The pairs a check reads: FlashCore, each gated baseline and the regression's reference on every judged
        workload (harness/bench/selection.py: on gates/bench.yaml `skip_unread` no other pair is timed)."""
        return {(w.name, b) for w in self.judged_and_shown(config, settings)[0]
                for b in (OURS, *self.gated, *((settings.stored_run.reference_for(w),) if self.regression else ()))}

    def watches(self, config: Config, settings: BenchSettings) -> list[Watch]:
        """The ratios whose spread a check judges: FlashCore against each pair `reads` names but its own, at this
        workload's spread limit (harness/bench/extend.py: a noisy one gets its workload more rounds)."""
        workloads = {w.name: w for w in self.judged_and_shown(config, settings)[0]}
        return [Watch((w, OURS), (w, b), self.spread_limit(workloads[w]))
                for w, b in self.reads(config, settings) if b != OURS]


def measure_options(ctx: GateContext, settings: BenchSettings, noisy: bool = False) -> Options:
    """The same for every gate of a run (so they share one Measurer): the pairs no check reads left untimed."""
    from harness.bench.runner import Options

    return Options(settings.timing, ctx.seed, ctx.fault, noisy, untimed=selection.untimed(ctx.config, settings),
                   watches=selection.watches(ctx.config, settings))


def measure_all(ctx: GateContext, measurer: Measurer, settings: BenchSettings, workloads: Sequence[Workload],
                backends: Sequence[str]) -> dict[str, dict[str, Measurement]]:
    """Every (workload, backend), each pairing group (a workload, or one sweep's points) in its own rounds; a
    crash while timing becomes each pair's "not available" (with its log)."""
    out: dict[str, dict[str, Measurement]] = {}
    groups = settings.pairing_groups(workloads)
    for i, group in enumerate(groups):
        names = ", ".join(w.name for w in group)
        ctx.step(f"{names}: {', '.join(backends)} in interleaved rounds ({i + 1}/{len(groups)})")
        try:
            got = measurer.measure_group(group, backends)
        except Exception as e:  # noqa: BLE001 - one group's crash is that group's result
            ctx.log(f"{names}:\n{traceback.format_exc()}")
            why = f"{CRASHED}: {type(e).__name__}: {e}"
            got = {(w.name, b): not_available(w, b, why, measurer.seed(w)) for w in group for b in backends}
        for wl in group:
            out[wl.name] = {b: got[(wl.name, b)] for b in backends}
            for b in backends:
                ctx.log(measurement_line(got[(wl.name, b)]))
    return out


def measurement_line(m: Measurement) -> str:
    """One log line: the absolute numbers (drift-sensitive), the rounds and the clocks."""
    s = m.summary
    if s is None:
        return f"{m.workload} {m.backend}: not available: {m.why}"
    clock = f", SM clock {min(m.clock_mhz):.0f}-{max(m.clock_mhz):.0f} MHz (probe)" if m.clock_mhz else ""
    more = f" ({m.base_rounds} base, the rest extension rounds)" if m.extended else ""
    return (f"{m.workload} {m.backend}: median {s.median_ms:.4g} ms, {m.throughput:.4g} {m.unit}, absolute rel std "
            f"{100 * s.rel_std:.2f} % over {s.reps} rounds{more} of {m.pairing or 'its own'}{clock}; NVML start "
            f"{dict(m.clocks_start)}, end {dict(m.clocks)}")


def write_measurements(ctx: GateContext, settings: BenchSettings, by_wl: dict[str, dict[str, Measurement]]) -> str:
    """logs/<gate>.bench.json: this gate's measurements in the stored-run format (usable as one)."""
    from harness import env

    rel = f"logs/{ctx.spec.name}.bench.json"
    items = [m for ms in by_wl.values() for m in ms.values()]
    data = run_dict(items, env.collect(ctx.repo_root), timing_dict(settings.timing), f"gate {ctx.spec.name}")
    (ctx.run_dir / rel).parent.mkdir(parents=True, exist_ok=True)
    (ctx.run_dir / rel).write_text(json.dumps(data, indent=1) + "\n")
    return rel


def references(settings: BenchSettings, workloads: Sequence[Workload]) -> dict[str, str]:
    """The regression check's reference backend per workload (gates/bench.yaml stored_run)."""
    return {w.name: settings.stored_run.reference_for(w) for w in workloads}


def perf_checks(wl: Workload, ms: dict[str, Measurement], p: PerfParams, ref: str | None,
                stored: Run | pv.Missing | None, env_now: dict[str, Any], judged: JudgedParams) -> list[Check]:
    """Per gated baseline: the paired ratio's spread, then the ratio; with a reference (regression: true): its
    ratio's spread (unless gated already) and the regression check."""
    ours = ms[OURS]
    limit = p.spread_limit(wl)
    checks: list[Check] = []
    for b in p.gated:
        checks.append(pv.verdict_ratio_spread(wl.name, ours, ms[b], limit, judged))
        checks.append(pv.verdict_ratio(wl.name, ours, ms[b], p.min_ratio, limit, judged))
    if ref is not None:
        if ref not in p.gated:
            checks.append(pv.verdict_ratio_spread(wl.name, ours, ms[ref], limit, judged))
        pair = pv.stored_pair(stored, ours, ms[ref], env_now) if ours.available and ms[ref].available else None
        checks.append(pv.verdict_regression(wl.name, ours, ms[ref], pair, p.regression_margin, limit, judged))
    return checks


def _gpu_now() -> dict[str, Any]:
    """This run's GPU model, as env.collect records it (harness/bench/stored.py compares the two)."""
    import torch

    if not torch.cuda.is_available():
        return {"gpu": None, "gpu_sm_count": None}
    return {"gpu": str(torch.cuda.get_device_name(0)),
            "gpu_sm_count": int(torch.cuda.get_device_properties(0).multi_processor_count)}


def _torch_version() -> str | None:
    import torch

    return str(torch.__version__)


def run_perf(ctx: GateContext, *, noisy: bool = False, stored_path: Path | None = None) -> GateResult:
    """The gate; `noisy` (test-only) adds side-stream noise, `stored_path` replaces the stored run (selftest)."""
    reason = gpu.cuda_unavailable_reason()
    if reason is not None:
        return ctx.verdict_only(Status.NOT_RUN, reason)
    p: PerfParams = ctx.params
    key = f"phases.{ctx.spec.phase}.gates.{ctx.spec.name}"
    try:
        settings = ctx.config.once(BENCH_FILE, lambda _: load_bench_settings(ctx.config))
        check_backends(ctx.config.gates_dir / PHASES_FILE, f"{key}.baselines", p.baselines, BASELINES)
        check_backends(ctx.config.gates_dir / PHASES_FILE, f"{key}.gated", p.gated, BASELINES)
        gpu.load_flashcore(0)
        part = shard_perf.part_of(ctx)  # a run in parts: this worker's share of the workloads
    except (ConfigError, gpu.FlashcoreUnavailable, ValueError) as e:
        return ctx.verdict_only(Status.ERROR, str(e))
    workloads, reported = (shard_perf.mine(ctx.config, part, ws) for ws in p.judged_and_shown(ctx.config, settings))
    refs = references(settings, workloads) if p.regression else {}
    backends = gate_backends(p, refs)
    from harness.bench.runner import shared

    env_now = {**_gpu_now(), "torch": _torch_version()}
    here = per_gpu.model_of(env_now)
    stored = load_stored(settings, ctx.repo_root, here, stored_path) if p.regression else None
    measurer = shared(ctx.run_dir, measure_options(ctx, settings, noisy))
    by_wl = measure_all(ctx, measurer, settings, [*workloads, *reported], backends)
    measurer.release()  # free the inputs and the flush buffer for the next gate; the results stay cached
    checks = [c for wl in workloads
              for c in perf_checks(wl, by_wl[wl.name], p, refs.get(wl.name), stored, env_now, settings.judged)]
    geomean_over = [w.name for w in shard_perf.mine(ctx.config, part, ctx.workloads())]
    checks += geomean_checks(p, geomean_over, by_wl, settings.judged) if part is None else []
    log_json = write_measurements(ctx, settings, by_wl)
    details = perf_details(ctx, settings, [*workloads, *reported], backends, by_wl, stored, log_json, refs)
    details["report_only"] = [w.name for w in reported]
    if part is not None:  # the geometric mean is judged once over every part's measurements (shard_join.py)
        details["geomean_workloads"] = geomean_over
    notice = stored_notice(stored, checks)
    if notice:
        details[NOTICE_KEY] = notice
    if p.ceiling:
        details["ceiling"] = ceiling_details(ctx, p, by_wl)
    return ctx.result(checks, details=details, logs=[log_json])


def geomean_checks(p: PerfParams, judged: Sequence[str], by_wl: Mapping[str, Mapping[str, Measurement]],
                   rules: JudgedParams) -> list[Check]:
    """Per gated baseline with `min_geomean` > 0: the geometric mean of the paired ratios over `judged`."""
    return [pv.verdict_geomean(f"geomean over {len(judged)} workloads",
                               [(by_wl[w][OURS], by_wl[w][b]) for w in judged], p.min_geomean, p.max_rel_std, rules)
            for b in p.gated if p.min_geomean > 0]


def gate_backends(p: PerfParams, refs: Mapping[str, str]) -> list[str]:
    """FlashCore, the gated baselines, the others and the regression's references, once each."""
    return [OURS, *dict.fromkeys((*p.gated, *p.baselines, *refs.values()))]


def perf_plots(gate: str, p: PerfParams, settings: BenchSettings, names: Sequence[str],
               by_wl: Mapping[str, Mapping[str, Measurement]], backends: Sequence[str]) -> dict[str, Any]:
    """The ratio chart over `names` and, with sweep points among them, the TFLOPS-vs-S chart."""
    baselines = [b for b in backends if b != OURS]
    ratio_svg, ratio_note = report.ratio_chart(
        names, by_wl, ["fa3", *[b for b in baselines if b != "fa3"]] if "fa3" in baselines else baselines,
        f"FlashCore speed / baseline speed (gated: {', '.join(p.gated)} >= {p.min_ratio:g})",
        p.min_ratio, f"{gate}-ratio")
    sweep = [w for w in settings.sweep_workloads if w.name in by_wl]
    seq_svg, seq_note = report.seqlen_chart(sweep, by_wl, backends, f"{gate}-seqlen") if sweep \
        else (None, "the sweep is not part of this gate (sweep: false)")
    return {"ratio_svg": ratio_svg, "ratio_note": ratio_note, "seqlen_svg": seq_svg, "seqlen_note": seq_note}


def ceiling_details(ctx: GateContext, p: PerfParams, by_wl: dict[str, dict[str, Measurement]]) -> dict[str, Any]:
    """The matmul ceiling, measured now, and FlashCore's TFLOPS as a fraction of it per workload (or why not)."""
    from harness.bench import ceiling

    ctx.step(f"ceiling: {p.ceiling} {p.ceiling_n}^3")
    try:
        c = ceiling.measure(p.ceiling, p.ceiling_n)
    except Exception as e:  # noqa: BLE001 - a ceiling that cannot run is shown as such, the gate's verdicts stand
        ctx.log(f"ceiling {p.ceiling}:\n{traceback.format_exc()}")
        return {"kind": p.ceiling, "tflops": None, "why": f"{type(e).__name__}: {e}", "fraction": {}}
    ctx.log(f"ceiling: {c.what}: {c.tflops:.1f} TFLOPS")
    ours = {name: ms[OURS].tflops for name, ms in by_wl.items()}
    fraction = {name: round(t / c.tflops, 4) for name, t in ours.items() if t is not None}
    return {"kind": c.kind, "what": c.what, "tflops": round(c.tflops, 1), "why": "", "fraction": fraction}


def perf_details(ctx: GateContext, settings: BenchSettings, workloads: Sequence[Workload], backends: Sequence[str],
                 by_wl: dict[str, dict[str, Measurement]], stored: Run | pv.Missing | None,
                 log_json: str, refs: dict[str, str]) -> dict[str, Any]:
    p: PerfParams = ctx.params
    run = stored if isinstance(stored, Run) else None
    names = [w.name for w in workloads]
    return {
        "base_seed": ctx.seed,
        "gated": list(p.gated),
        "min_ratio": p.min_ratio,
        "max_rel_std": p.max_rel_std,
        "long_context_max_rel_std": p.long_context_max_rel_std or p.max_rel_std,
        "regression": p.regression,
        "regression_margin": p.regression_margin,
        "timing": timing_dict(settings.timing),
        "stored_run": {"file": run.path if run else settings.stored_run.files, "files": settings.stored_run.files,
                       "found": run is not None,
                       "why": stored.why if isinstance(stored, pv.Missing) else "",
                       "gpu": run.gpu if run else None, "commit": run.commit if run else None,
                       "torch": run.environment.get("torch") if run else None,
                       "created": run.environment.get("utc_time") if run else None,
                       "references": sorted(set(refs.values()))} if p.regression else None,
        "workloads": [report.workload_table(w, [by_wl[w.name][b] for b in backends], settings.anchor_for(w),
                                            judged=(*p.gated, *([refs[w.name]] if w.name in refs else ())))
                      for w in workloads],
        "not_available": report.not_available(m for ms in by_wl.values() for m in ms.values()),
        "plots": perf_plots(ctx.spec.name, p, settings, names, by_wl, backends),
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

    # against a stored run measured moments before (harness/selftest_perf.py)
    selftests = (
        SelfTest("perf-clean", "perf", "clean", "a clean re-run is within the spread limit and the regression margin",
                 must_fail="-"),
        SelfTest("perf-slow", "perf", "slow", "kernel fault 4 (producer waits after every K/V tile) is > 5 % slower "
                 "relative to the reference backend", must_fail="perf-fa2/regression"),
        SelfTest("perf-noisy", "perf", "noisy", "side-stream matmul bursts alongside FlashCore's calls (later half of "
                 "the rounds) fail the paired ratios' spread limit, and no speed verdict is drawn from them",
                 must_fail="perf-fa2/spread"),
    )


@register("perf-cudnn")
class PerfCudnnGate(PerfGate):
    """Phase 4: at least as fast as cuDNN (torch SDPA's cuDNN backend)."""

    selftests = (SelfTest("perf-cudnn-slow", "perf", "slow", "kernel fault 4 (the producer sleeps 20 us after every "
                          "K/V tile): FlashCore below cuDNN, and slower than the stored run relative to FA2"),)


@register("perf-fa3")
class PerfFa3Gate(PerfGate):
    """Phase 4: paired speed against FlashAttention-3 per workload and as a geometric mean. Without FA3 on the
    host the gate is an ERROR that says how to install it (harness/bench/backends.py), never a pass."""

    selftests = (SelfTest("perf-fa3-slow", "perf", "slow", "kernel fault 4 (the producer sleeps 20 us after every "
                          "K/V tile): FlashCore below FA3 per workload and in the geometric mean"),)


@register("perf-fp8")
class PerfFp8Gate(PerfGate):
    """FP8 (E4M3) prefill paired with FA3's FP8 (flash_attn_func with the same descales), with the chip's
    FP8 matmul rate measured in the same run as the ceiling; without FA3 an ERROR with the install hint."""

    selftests = (SelfTest("perf-fp8-slow", "perf", "slow", "kernel fault 4 reaches attention_fp8 (the producer sleeps "
                          "20 us after every K/V tile): below FA3's FP8, in the geometric mean and against the stored "
                          "run"),)


@register("perf-serving")
class PerfServingGate(PerfGate):
    """The serving workloads (varlen prefill, per-sequence-length decode) paired with FA3's varlen and
    KV-cache entry points; without FA3 an ERROR with the install hint, as perf-fa3."""

    # The kernel faults reach attention() and attention_fp8() only (flashcore.serving takes no debug_fault), so the
    # planted slowdown is made in Python: each flashcore.serving call runs twice, timed on the GPU like any other.
    selftests = (SelfTest("perf-serving-twice", "perf", "serving-twice", "every flashcore.serving call runs twice: "
                          "below FA3's varlen call, and slower than the stored run"),)
