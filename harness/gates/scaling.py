"""Scaling gate (phase 6): no "context collapse" from 2K to 128K tokens.

The sweep of gates/bench.yaml runs a fixed number of tokens per batch (batch = tokens / S), so every point
does the same FLOPs per token row and the TFLOPS should stay flat. Per causal mode: for each S in
`judged_seqlens`, TFLOPS(S) >= min_ratio x the best TFLOPS over `peak_seqlens` (ROADMAP: 32K >= 0.9 x the
2K-8K peak).

Paired, because the clock drifts: TFLOPS(32K) and TFLOPS(2K) timed seconds apart compare two clocks as much
as two sequence lengths. The points of one causal mode are timed in the same interleaved rounds (gates/bench.yaml
sweep; BenchSettings.pairing_groups), so per round both FlashCore calls ran within one round (~65-220 ms) under
the same clock regime, and TFLOPS(S) / TFLOPS(S') = (FLOPs(S) / FLOPs(S')) x time(S') / time(S) of that
round is free of the drift both share. The judged ratio is the median over rounds, against the peak S (the one
with the lowest ratio: where FlashCore was fastest); its run-to-run spread (rel_std[tflops_s<S>_vs_peak]) must
be <= max_rel_std, else the ratio is not judged. Considered and not chosen: normalising each S by FA2 in its
own rounds (FlashCore/FA2 at 32K over FlashCore/FA2 at the peak) judges FlashCore's scaling relative to FA2's,
not the ROADMAP's absolute flatness, and would pass a collapse FA2 shares.

Per clock cycle (`per_clock: true`): past 32K tokens the sweep runs at batch 1 and a round lasts ~1.3 s; a 0.2 s
call at 128K and a 3 ms call at 8K then see different clocks of one round (probed 1425 vs 1780 MHz), and the
per-second ratio spread 3.8-5 % run to run on the H100 (0.7-1.5 % per cycle, same data). FlashCore against
itself is compute-bound at every S, so time x the call's SM clock (cycles) is what grows when the context
collapses; the per-second ratio is shown beside it. The call's clock: the mean of the probes before and after it
for calls of gates/bench.yaml clock_probe_after_ms or more (every sweep point on the H200), else the one before.
Absolute TFLOPS (median of all repetitions) and the baselines are shown in the chart and tables, not judged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.bench import report
from harness.bench.extend import Watch
from harness.bench.settings import BASELINES, BENCH_FILE, OURS, check_backends, load_bench_settings, timing_dict
from harness.gates.base import Gate, GateContext, SelfTest
from harness.gates.perf import measure_all, write_measurements
from harness.gates.registry import register
from harness.results import Check, GateResult, Status
from harness.schema import PHASES_FILE, ConfigError, param
from harness.support import gpu
from harness.support import perf_verdict as pv

if TYPE_CHECKING:
    from harness.bench.settings import BenchSettings
    from harness.schema import Config, Workload


@dataclass(frozen=True)
class ScalingParams:
    peak_seqlens: tuple[int, ...] = param()  # the reference: best TFLOPS over these sweep points
    judged_seqlens: tuple[int, ...] = param()  # each must reach min_ratio x that peak
    min_ratio: float = param(gt=0)
    max_rel_std: float = param(gt=0)  # run-to-run relative std of the paired TFLOPS ratio
    baselines: tuple[str, ...] = param()  # drawn beside FlashCore in the chart, not judged
    per_clock: bool = param(default=False)  # judge TFLOPS per SM clock cycle (time x the call's clock)
    # the spread limit for points of kind long-context (batch 1 past the sweep's tokens); 0: max_rel_std
    long_context_max_rel_std: float = param(default=0.0, ge=0)

    def measured(self, config: Config, settings: BenchSettings) -> list[Workload]:
        """The sweep's points (harness/shard_perf.py deals them to the parts of a run by causal mode)."""
        return list(settings.sweep_workloads)

    def reads(self, config: Config, settings: BenchSettings) -> set[tuple[str, str]]:
        """FlashCore at every point (judged against itself); the baselines are drawn, never read by a check."""
        return {(w.name, OURS) for w in settings.sweep_workloads}

    def watches(self, config: Config, settings: BenchSettings) -> list[Watch]:
        """Each judged length against each peak length, per causal mode (which peak is judged shows only after the
        rounds): FlashCore's paired ratios whose spread a check judges (harness/bench/extend.py)."""
        points = {(w.seqlen_q, w.causal): w for w in settings.sweep_workloads}
        return [Watch((points[s, c].name, OURS), (points[peak, c].name, OURS),
                      pv.spread_limit(points[s, c], self.max_rel_std, self.long_context_max_rel_std), self.per_clock)
                for c in settings.sweep.causal for s in self.judged_seqlens for peak in self.peak_seqlens
                if (s, c) in points and (peak, c) in points]


def mode(causal: bool) -> str:
    return "sweep-causal" if causal else "sweep-non-causal"


@register("scaling")
class ScalingGate(Gate):
    Params = ScalingParams
    needs_gpu = True
    # A kernel fault slows every sequence length alike (fault 4 adds 20 us per K/V tile, as the work grows), which
    # leaves the ratios flat: the planted collapse is made in Python, flashcore.attention run twice from the
    # shortest judged length on, timed on the GPU like any other call.
    selftests = (SelfTest("scaling-collapse", "perf", "collapse", "flashcore.attention runs twice on calls from the "
                          "shortest judged sequence length on: TFLOPS there half the peak's"),)

    def run(self, ctx: GateContext) -> GateResult:
        reason = gpu.cuda_unavailable_reason()
        if reason is not None:
            return ctx.verdict_only(Status.NOT_RUN, reason)
        p: ScalingParams = ctx.params
        file = ctx.config.gates_dir / PHASES_FILE
        key = f"phases.{ctx.spec.phase}.gates.{ctx.spec.name}"
        try:
            settings = ctx.config.once(BENCH_FILE, lambda _: load_bench_settings(ctx.config))
            check_backends(file, f"{key}.baselines", p.baselines, BASELINES)
            for name in ("peak_seqlens", "judged_seqlens"):
                for i, s in enumerate(getattr(p, name)):
                    if s not in settings.sweep.seqlens:
                        raise ConfigError(file, f"{key}.{name}[{i}]", s,
                                          f"not a sweep seqlen of {settings.file} ({settings.sweep.seqlens})")
            gpu.load_flashcore(0)
        except (ConfigError, gpu.FlashcoreUnavailable) as e:
            return ctx.verdict_only(Status.ERROR, str(e))
        from harness import shard_perf
        from harness.bench.runner import shared  # late: see harness/gates/perf.py
        from harness.gates.perf import measure_options

        try:
            part = shard_perf.part_of(ctx)
        except ValueError as e:
            return ctx.verdict_only(Status.ERROR, str(e))
        backends = [OURS, *dict.fromkeys(p.baselines)]
        measurer = shared(ctx.run_dir, measure_options(ctx, settings))
        sweep = shard_perf.mine(ctx.config, part, settings.sweep_workloads)  # a run in parts: this part's modes
        by_wl = measure_all(ctx, measurer, settings, sweep, backends)
        measurer.release()
        checks: list[Check] = []
        tables: list[dict[str, Any]] = []
        for causal in (c for c in settings.sweep.causal if any(w.causal == c for w in sweep)):
            points = {w.seqlen_q: by_wl[w.name][OURS] for w in sweep if w.causal == causal}
            kinds = {w.seqlen_q: w for w in sweep if w.causal == causal}
            for s in p.judged_seqlens:
                limit = pv.spread_limit(kinds[s], p.max_rel_std, p.long_context_max_rel_std)
                checks.append(pv.verdict_scaling_spread(mode(causal), points, p.peak_seqlens, s, limit, p.per_clock,
                                                        settings.judged))
                checks.append(pv.verdict_scaling(mode(causal), points, p.peak_seqlens, s, p.min_ratio, limit,
                                                 p.per_clock, settings.judged))
            tables += [report.workload_table(w, [by_wl[w.name][b] for b in backends], settings.anchor_for(w))
                       for w in sweep if w.causal == causal]
        log_json = write_measurements(ctx, settings, by_wl)
        svg, note = report.seqlen_chart(sweep, by_wl, backends, f"{ctx.spec.name}-seqlen")
        details = {
            "base_seed": ctx.seed,
            "sweep": {"tokens": settings.sweep.tokens, "heads": settings.sweep.heads,
                      "head_dim": settings.sweep.head_dim, "dtype": settings.sweep.dtype,
                      "seqlens": list(settings.sweep.seqlens)},
            "peak_seqlens": list(p.peak_seqlens),
            "judged_seqlens": list(p.judged_seqlens),
            "min_ratio": p.min_ratio,
            "max_rel_std": p.max_rel_std,
            "long_context_max_rel_std": p.long_context_max_rel_std or p.max_rel_std,
            "per_clock": p.per_clock,
            "timing": timing_dict(settings.timing),
            "workloads": tables,
            "not_available": report.not_available(m for ms in by_wl.values() for m in ms.values()),
            "plots": {"seqlen_svg": svg, "seqlen_note": note},
            "measurements_file": log_json,
        }
        return ctx.result(checks, details=details, logs=[log_json])
