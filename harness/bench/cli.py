"""`python -m harness bench` (make bench, make bench-baseline).

run the pytest-benchmark suite (bench/) with live progress -> read its JSON -> print a compact table (and
the baselines against the ROADMAP anchors) -> with --update-baseline, write the stored run that the perf
gates' regression check compares with (the file of the GPU model the run was measured on: harness/bench/stored.py)
-> exit code.

The stored run is the whole paired run (every backend, every repetition with its round); the regression check
reads FlashCore's speed relative to the reference backend (gates/bench.yaml stored_run) from it, so it is
written only when, on every workload, that paired ratio's run-to-run spread is within stored_run.max_rel_std.

Exit: 0 when the suite ran and every FlashCore measurement exists (and the stored run was written, if
asked); 1 otherwise; 2 for a bad gate file. `--from FILE` re-reads a saved JSON (a bench.json or a gate's
logs/<gate>.bench.json) instead of running anything, so no GPU is needed to print or store it.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from harness.bench import paired, remeasure, report
from harness.bench import stored as per_gpu
from harness.bench.record import Measurement, RecordError, Run, read_run, run_dict
from harness.bench.settings import BACKENDS, OURS, BenchSettings, load_bench_settings
from harness.config import load_config
from harness.schema import Config, ConfigError, Workload
from harness.support import perf_verdict as pv

EXIT_CONFIG = 2


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gates-dir", type=Path, default=Path("gates"), help="directory of the YAML (default gates)")
    p.add_argument("--out", type=Path, help="where bench.json and table.txt go (default reports/bench-<time>)")
    p.add_argument("--workloads", default="", help="comma-separated workload or set names (default: the suite's); with "
                   "--from, only those of the saved run (its table, its stored run)")
    p.add_argument("--backends", default="", help=f"comma-separated, of {', '.join(BACKENDS)} (default: the suite's)")
    p.add_argument("--seed", type=int, help="base seed of the inputs (default: a fresh one, recorded)")
    p.add_argument("--update-baseline", action="store_true",
                   help="write this GPU model's stored run (gates/bench.yaml stored_run.files) from this run")
    p.add_argument("--from", dest="from_json", type=Path,
                   help="read this JSON instead of running the suite (bench.json or logs/<gate>.bench.json)")
    p.add_argument("pytest_args", nargs=argparse.REMAINDER,
                   help="after --: more pytest arguments (e.g. -- --benchmark-autosave --benchmark-compare)")


def run_suite(args: argparse.Namespace, out: Path) -> tuple[int, Path]:
    """The suite in a child pytest (its progress lines go straight to this terminal); its exit code and JSON."""
    json_path = out / "bench.json"
    cmd = [sys.executable, "-m", "pytest", "bench", "-q", "-rsfE", "-p", "no:cacheprovider",
           f"--benchmark-json={json_path}", "--benchmark-sort=name", "--benchmark-columns=min,median,max,rounds",
           f"--gates-dir={args.gates_dir}"]
    if args.workloads:
        cmd.append(f"--bench-workloads={args.workloads}")
    if args.backends:
        cmd.append(f"--bench-backends={args.backends}")
    if args.seed is not None:
        cmd.append(f"--bench-seed={args.seed}")
    cmd += [a for a in args.pytest_args if a != "--"]
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    return subprocess.run(cmd, check=False).returncode, json_path


def _measure_again(args: argparse.Namespace, out: Path) -> remeasure.Measure:
    """The suite again on some workloads, into out/again-N (for remeasure.settle)."""
    def measure(workloads: Sequence[str], attempt: int) -> Run | None:
        again = out / f"again-{attempt}"
        again.mkdir(parents=True, exist_ok=True)
        (again / "bench.json").unlink(missing_ok=True)  # never an earlier invocation's file in a reused --out
        rc, source = run_suite(argparse.Namespace(**{**vars(args), "workloads": ",".join(workloads)}), again)
        if rc != 0:
            print(f"flashcore bench: timing again: the suite exited {rc}", file=sys.stderr)
            return None
        try:
            return read_run(source)
        except RecordError as e:
            print(f"flashcore bench: timing again: {e}", file=sys.stderr)
            return None
    return measure


def ordered(run: Run, settings: BenchSettings) -> tuple[list[Workload], dict[str, dict[str, Measurement]]]:
    """The run's workloads in suite order (then any others), and its measurements by workload and backend."""
    by_wl: dict[str, dict[str, Measurement]] = {}
    specs: dict[str, Workload] = {}
    for (w, b), m in run.measurements.items():
        by_wl.setdefault(w, {})[b] = m
        specs[w] = m.spec
    order = [w.name for w in settings.suite_workloads if w.name in specs]
    order += [w for w in specs if w not in order]
    for w in by_wl:
        by_wl[w] = {b: by_wl[w][b] for b in BACKENDS if b in by_wl[w]}
    return [specs[w] for w in order], by_wl


def only_workloads(run: Run, config: Config, names: str) -> Run:
    """A saved run cut to the workloads named (workloads.yaml names or sets, or names the run holds, e.g. the
    sweep's points): so a stored run can hold the workloads that were measured steadily and leave out a noisy one,
    whose regression check is then not applicable (and says so) until a later bench-baseline stores it."""
    wanted: set[str] = set()
    held = {w for w, _ in run.measurements}
    for name in filter(None, (n.strip() for n in names.split(","))):
        if name in config.sets:
            wanted.update(config.sets[name])
        elif name in config.workloads or name in held:
            wanted.add(name)
        else:
            raise ValueError(f"--workloads: {name!r} is neither a workload or set of workloads.yaml nor in {run.path}")
    left_out = sorted(held - wanted)
    if left_out:
        print(f"flashcore bench: left out of {run.path}: {', '.join(left_out)}")
    kept = {key: m for key, m in run.measurements.items() if key[0] in wanted}
    return dataclasses.replace(run, measurements=kept)


def _problems(run: Run, settings: BenchSettings) -> list[tuple[str, str, bool]]:
    """Why this run must not become the stored run, as (workload or "", why, whether only its spread is the
    problem: a noisy pair that timing the workload again may settle)."""
    ours = [m for m in run.measurements.values() if m.backend == OURS]
    if not ours:
        return [("", "the run has no FlashCore measurement", False)]
    problems: list[tuple[str, str, bool]] = []
    if per_gpu.model_of(run.environment) is None:
        problems.append(("", "the run records no GPU: a stored run is kept per GPU model and must name its GPU", False))
    j = settings.judged
    for m in ours:
        ref_name = settings.stored_run.reference_for(m.spec)
        ref = run.get(m.workload, ref_name)
        w = m.workload
        if m.summary is None:
            problems.append((w, f"{w}: FlashCore not measured ({m.why or 'no repetitions'})", False))
        elif ref is None or ref.summary is None:
            why = ref.why if ref is not None and ref.why else "not in the run"
            problems.append((w, f"{w}: {ref_name} (the regression reference) not measured ({why})", False))
        else:
            r = paired.speed_ratio(m, ref)
            if r is None:
                problems.append((w, f"{w}: FlashCore and {ref_name} were not timed in the same rounds"
                                 " (an unpaired, older record): re-measure", False))
            elif (thin := pv.too_little(r, j.stored_min_rounds, j.stored_min_spread_groups)) is not None:
                problems.append((w, f"{w}: FlashCore / {ref_name}: {thin}", False))
            elif r.rel_std > (limit := settings.stored_run.spread_limit(m.spec)):
                problems.append((w, f"{w}: rel std of FlashCore / {ref_name} (paired) {100 * r.rel_std:.2f} %"
                                 f" > {100 * limit:.2f} % (noisy)", True))
        for x in (m, ref):
            if x is not None and x.planted:
                problems.append((w, f"{w}: planted test-only fault ({x.planted})", False))
    return problems


def baseline_problems(run: Run, settings: BenchSettings) -> list[str]:
    """Why this run must not become the stored run (empty: it may)."""
    return [why for _, why, _ in _problems(run, settings)]


def noisy_workloads(run: Run, settings: BenchSettings) -> list[str]:
    """The workloads whose only problem as a stored run is their pair's spread, in the run's order; [] when anything
    else stands in the way too (timing those again could not make the run storable)."""
    problems = _problems(run, settings)
    if any(not spread for _, _, spread in problems):
        return []
    return list(dict.fromkeys(w for w, _, _ in problems))


def update_baseline(run: Run, settings: BenchSettings, repo_root: Path) -> int:
    problems = baseline_problems(run, settings)
    here = per_gpu.model_of(run.environment)
    found = per_gpu.find(repo_root, settings.stored_run.files, here)
    if found.path is None and found.applicable:  # unreadable, or two files for this GPU: which one is meant?
        problems.append(found.why)
    target = per_gpu.target(repo_root, settings.stored_run.files, here) if here is not None \
        else repo_root / settings.stored_run.files
    if problems:
        print(f"flashcore bench: not writing {target}:", *(f"  - {p}" for p in problems), sep="\n", file=sys.stderr)
        return 1
    data = run_dict(run.measurements.values(), run.environment, run.timing,
                    f"python -m harness bench --update-baseline (from {run.path})")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(data, indent=1) + "\n")
    n = sum(1 for m in run.measurements.values() if m.backend == OURS)
    refs = ", ".join(dict.fromkeys(settings.stored_run.reference_for(m.spec) for m in run.measurements.values()
                                   if m.backend == OURS))
    print(f"stored run written: {target} ({n} FlashCore workloads paired with {refs}, GPU {run.gpu}, torch "
          f"{run.environment.get('torch')}, commit {run.commit}); commit it to make it the perf gates' regression"
          " reference")
    return 0


def bench_command(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.gates_dir)
        settings = load_bench_settings(config)
    except ConfigError as e:
        print(f"flashcore bench: bad gate file: {e}", file=sys.stderr)
        return EXIT_CONFIG
    suite_rc = 0
    if args.from_json:
        source = args.from_json
        out = args.out
    else:
        from harness.support.gpu import cuda_unavailable_reason

        reason = cuda_unavailable_reason()
        if reason is not None:
            print(reason, file=sys.stderr)
            return 1
        out = args.out or Path("reports") / f"bench-{dt.datetime.now(dt.UTC).strftime('%Y%m%dT%H%M%SZ')}"
        out.mkdir(parents=True, exist_ok=True)
        suite_rc, source = run_suite(args, out)
    try:
        run = read_run(source)
    except RecordError as e:
        print(f"flashcore bench: {e} (pytest exit code {suite_rc})", file=sys.stderr)
        return 1
    if args.update_baseline and not args.from_json and out is not None:
        run = remeasure.settle(run, lambda r: noisy_workloads(r, settings), _measure_again(args, out),
                               settings.stored_run.remeasure)
    if args.from_json and args.workloads:
        try:
            run = only_workloads(run, config, args.workloads)
        except ValueError as e:
            print(f"flashcore bench: {e}", file=sys.stderr)
            return EXIT_CONFIG
    workloads, by_wl = ordered(run, settings)
    backends = [b for b in BACKENDS if any(b in ms for ms in by_wl.values())]
    anchors = {w.name: settings.anchor_for(w) for w in workloads}
    table = report.text_table(workloads, by_wl, backends, anchors)
    print(f"\nFlashCore bench ({source}; GPU {run.gpu}, commit {(run.commit or 'unknown')[:12]})\n{table}")
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "table.txt").write_text(table + "\n")
    rc = 0 if suite_rc == 0 else 1
    missing = [w.name for w in workloads if by_wl[w.name].get(OURS) is None or not by_wl[w.name][OURS].available]
    if missing:
        print(f"flashcore bench: FlashCore did not run: {', '.join(missing)}", file=sys.stderr)
        rc = 1
    if args.update_baseline:
        rc = max(rc, update_baseline(run, settings, Path.cwd()))
    return rc
