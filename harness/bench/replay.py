"""Replay a run timed with a fixed budget as if it had used sequential rounds (pure, offline; no torch).

    python -m harness.bench.replay gates/baselines/bench-h200.json [RUN ...] [--fractions 0.4,0.5,0.6]
        [--above 0.5,0.6,0.75,1.0]

For each run (a stored run, `make bench` JSON or a gate's logs/<gate>.bench.json[.xz]: per-round data) and each
base fraction X and threshold: the base is the first X of each pairing group's rounds (at least judged.min_rounds);
every ratio the gates judge (selection.watches, at its limit) is read on the base; a workload in one above
threshold x its limit is extended, which here means it keeps all the rounds the run had (the cap = the run's own
budget). Per row: the ratios read, those extended and their workloads, spread failures with all the rounds (what
the fixed budget judged), with the base alone (no extension) and with the rule, the largest change of a ratio's
median against all the rounds, and the GPU time of the rounds (medians x rounds, the run's own backends): all of
it, the base, the extension. docs/perf-notes.md ("Sequential rounds") has the table that chose timing.extend_above.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.bench import extend, paired, selection
from harness.bench.record import Measurement, Run, read_run
from harness.bench.settings import load_bench_settings
from harness.config import load_config

Key = tuple[str, str]


def cut(m: Measurement, rounds: int) -> Measurement:
    """`m` as if only its rounds below `rounds` had run."""
    keep = [i for i, r in enumerate(m.rounds) if r < rounds]
    return dataclasses.replace(m, times_ms=tuple(m.times_ms[i] for i in keep), rounds=tuple(m.rounds[i] for i in keep),
                               clock_mhz=tuple(m.clock_mhz[i] for i in keep) if m.clock_mhz else (),
                               clock_after_mhz=tuple(m.clock_after_mhz[i] for i in keep) if m.clock_after_mhz else ())


@dataclass(frozen=True)
class Row:
    fraction: float
    above: float
    ratios: int  # watched ratios both sides of which the run holds
    extended: int  # of them, in an extended workload
    workloads: tuple[str, ...]  # the extended workloads
    fail_all: int  # spread above its limit with all the run's rounds (the fixed budget's verdict)
    fail_base: int  # ... with the base alone (no extension)
    fail_rule: int  # ... with the rule (extended: all rounds; else the base)
    max_shift: float  # the largest |median with the rule / median with all the rounds - 1|
    all_s: float  # GPU seconds of the run's rounds
    base_s: float
    extension_s: float


def _round_ms(ms: Sequence[Measurement]) -> float:
    return sum(statistics.median(m.times_ms) for m in ms)


def replay(run: Run, watches: Sequence[extend.Watch], fraction: float, above: float, min_rounds: int) -> Row:
    paired_ms = [m for m in run.measurements.values() if m.paired and m.times_ms]
    by_group: dict[str, list[Measurement]] = {}
    for m in paired_ms:
        by_group.setdefault(m.pairing, []).append(m)
    total = {g: max(max(m.rounds) for m in ms) + 1 for g, ms in by_group.items()}
    base = {g: min(n, max(min_rounds, math.ceil(fraction * n))) for g, n in total.items()}
    full: Mapping[Key, Measurement] = {(m.workload, m.backend): m for m in paired_ms}
    thin = {k: cut(m, base[m.pairing]) for k, m in full.items()}
    judged = [w for w in extend.relevant(watches, set(full)) if extend.spread(w, full) is not None]
    noisy = extend.noisy(thin, judged, above)
    rule = {k: (m if k[0] in noisy else thin[k]) for k, m in full.items()}
    fails = {name: sum(1 for w in judged if (s := extend.spread(w, ms)) is not None and s > w.limit)
             for name, ms in (("all", full), ("base", thin), ("rule", rule))}
    shift = 0.0
    for w in judged:
        a, b = paired.ratio(full[w.num], full[w.den], w.per_clock), paired.ratio(rule[w.num], rule[w.den], w.per_clock)
        if a is not None and b is not None:
            shift = max(shift, abs(b.value / a.value - 1))
    ext_s = sum((total[g] - base[g]) * _round_ms([m for m in ms if m.workload in noisy]) for g, ms in by_group.items())
    return Row(fraction, above, len(judged), sum(1 for w in judged if w.workloads & noisy), tuple(sorted(noisy)),
               fails["all"], fails["base"], fails["rule"], shift,
               sum(n * _round_ms(by_group[g]) for g, n in total.items()) / 1000,
               sum(n * _round_ms(by_group[g]) for g, n in base.items()) / 1000, ext_s / 1000)


def table(name: str, gpu: str, rows: Sequence[Row]) -> list[str]:
    out = [f"{name} ({gpu})", "| X | above | ratios | extended (workloads) | spread fails: all / base / rule | "
           "max median shift | rounds GPU s: all / base + extension |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r.fraction:.1f} | {r.above:.2f} | {r.ratios} | {r.extended} ({len(r.workloads)}) | "
                   f"{r.fail_all} / {r.fail_base} / {r.fail_rule} | {100 * r.max_shift:.2f} % | "
                   f"{r.all_s:.1f} / {r.base_s:.1f} + {r.extension_s:.1f} |")
    return out


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.bench.replay", description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--fractions", type=_floats, default=[0.4, 0.5, 0.6])
    ap.add_argument("--above", type=_floats, default=[0.5, 0.6, 0.75, 1.0])
    ap.add_argument("--gates", type=Path, default=Path("gates"))
    args = ap.parse_args(argv)
    config = load_config(args.gates)
    settings = load_bench_settings(config)
    watches = selection.watches(config, settings)
    for path in args.runs:
        run = read_run(path)
        rows = [replay(run, watches, x, t, settings.judged.min_rounds) for x in args.fractions for t in args.above]
        print("\n".join(table(path.name, run.gpu or "GPU not recorded", rows)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
