"""`make tune` (GPU): time every candidate tile configuration of each tuning shape against the default, paired in
interleaved rounds (the benchmark's timer, gates/bench.yaml), and write the table flashcore.attention reads.

First the compile-time points of the space are checked and the valid ones built in parallel (harness/tune/build.py;
`--build-only`, make tune-build, stops there and needs no GPU); the tuner then runs on build/tune/libflashcore.so,
which holds the defaults and every point that built clean.
Per shape: the run-time candidates of harness/tune/space.py and the head dim's built points (at the default
run-time knobs; one family at a time, no cross product), less those whose launch plan (fc_plan: point, BLOCK_N,
static or dynamic order, section size) equals the default's or an earlier candidate's; each must reproduce the
default's output (bit for bit at the same keys and rows per tile: neither the tile order nor stages, ping-pong,
rescale timing or the register split change a row's arithmetic) before it is timed. Per bucket, each candidate is
judged on every tuning shape that falls in it (harness/tune/select.py): it replaces the default when it is at least
`adopt_min_speedup` faster (geometric mean of paired medians) and no shape runs it slower by more than that
margin. Progress goes to stdout and, one line per finished shape, to OUT/progress.jsonl; `--resume OUT` skips
those. Last, kernel/tuned_points.inc lists the points the table file names, for make build (make tune runs it).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from flashcore.points import Point
from flashcore.tuning import DEFAULT, Entry, ShapeKey, Table, TableError, TileConfig, dump_tables, parse_tables
from harness.bench import paired
from harness.schema import Workload
from harness.tune.build import TUNE_BUILD_DIR, PointBuild, build_points, write_tuned_points
from harness.tune.select import choose
from harness.tune.settings import TuneSettings
from harness.tune.space import bucket, candidates

PROGRESS = "progress.jsonl"


def _say(msg: str) -> None:
    print(f"[tune] {msg}", flush=True)


def done_shapes(out: Path) -> dict[str, dict[str, Any]]:
    """The finished shapes of an earlier (interrupted) run: workload name -> its progress record."""
    path = out / PROGRESS
    if not path.is_file():
        return {}
    records = {}
    for line in path.read_text().splitlines():
        if line.strip():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by the interruption: that shape runs again
            records[rec["workload"]] = rec
    return records


PlanKey = tuple[int, str, bool, int, int]  # block_n, point, dynamic order, section heads, split count


def plan_key(fc: Any, q: Any, k: Any, v: Any, causal: bool, tile: TileConfig) -> PlanKey:
    p = fc.plan(q, k, v, causal=causal, tile=tile)
    return p.block_n, p.point, p.dynamic, p.section_heads, p.num_splits


def same_rows_and_keys(a: PlanKey, b: PlanKey) -> bool:
    """Whether two plans give bit-identical outputs by construction: the same keys per tile, query rows per tile
    (consumer warpgroups) and split count. Taller tiles may change the split-KV count and run a row through blocks
    its rows never see (an exp2 of a rounding residue, not exactly 1), and other splits sum in another order, so
    those are held to the tolerance instead."""
    pa, pb = Point.parse(a[1]), Point.parse(b[1])
    return (pa.block_n, pa.consumer_wgs, a[4]) == (pb.block_n, pb.consumer_wgs, b[4])


def tune_shape(fc: Any, wl: Workload, settings: TuneSettings, timing: Any, flush: Any, seed: int,
               points: tuple[Point, ...] = ()) -> dict[str, Any]:
    """One shape: its candidates (run-time knobs, then `points` at the default knobs) checked, deduplicated by
    plan, timed against the default; the progress record."""
    import torch

    from harness.bench.timing import Call, time_rounds
    from harness.support import gpu

    q, k, v = gpu.make_inputs(wl, seed, "cuda")
    compiled = fc.api.block_n_options(wl.head_dim)
    valid, rejected = candidates(settings.space, compiled, bucket(wl).mode == "decode")
    valid += [TileConfig(point=p.name) for p in points]
    default_plan = plan_key(fc, q, k, v, wl.causal, DEFAULT)
    plans = {default_plan: DEFAULT}  # launch plan -> the first point that makes it
    same_plan_as = []  # the others: judged by that point's time when the bucket's shapes are weighed together
    for cand in valid:
        rep = plans.setdefault(plan_key(fc, q, k, v, wl.causal, cand), cand)
        if rep is not cand:
            same_plan_as.append({"config": dataclasses.asdict(cand), "as": dataclasses.asdict(rep)})
    distinct = [(cand, pk) for pk, cand in plans.items() if cand is not DEFAULT]
    ref, _ = fc.attention(q, k, v, causal=wl.causal, tile=DEFAULT)
    checked: list[TileConfig] = []
    wrong: list[TileConfig] = []
    not_bitwise: list[TileConfig] = []
    for cand, pk in distinct:
        out, _ = fc.attention(q, k, v, causal=wl.causal, tile=cand)
        close = bool((out.float() - ref.float()).abs().max() <= 2e-2)
        if not close:
            wrong.append(cand)
        elif same_rows_and_keys(pk, default_plan) and not torch.equal(out, ref):
            not_bitwise.append(cand)  # same tile shape and splits must give the same bits: kept out, reported
        else:
            checked.append(cand)
    outs = {c.label: gpu.poisoned_outputs(wl, "cuda") for c in [DEFAULT, *checked]}
    calls = [Call((wl.name, c.label), _call(fc, q, k, v, wl.causal, c, *outs[c.label])) for c in [DEFAULT, *checked]]
    rounds = time_rounds(calls, timing, flush)
    base = rounds.times_ms.get((wl.name, DEFAULT.label), [])
    base_round = {r: t for r, (t, _) in paired.round_times(rounds.round_index.get((wl.name, DEFAULT.label), []),
                                                          base).items()}
    results: list[dict[str, Any]] = []
    for c in checked:
        key = (wl.name, c.label)
        if key not in rounds.times_ms:
            results.append({"config": dataclasses.asdict(c), "speedup": None,
                            "why": rounds.crashed.get(key, "not timed")})
            continue
        mine = paired.round_times(rounds.round_index[key], rounds.times_ms[key])
        pairs = [base_round[r] / t for r, (t, _) in mine.items() if r in base_round and t > 0]
        results.append({"config": dataclasses.asdict(c), "speedup": statistics.median(pairs) if pairs else None,
                        "rounds": len(pairs), "median_ms": statistics.median(rounds.times_ms[key])})
    timed = [r for r in results if r["speedup"] is not None]
    best = max(timed, key=lambda r: r["speedup"], default=None)
    adopt = best is not None and best["speedup"] >= settings.adopt_min_speedup
    chosen = TileConfig(**best["config"]) if adopt and best else DEFAULT
    return {
        "workload": wl.name, "shape": wl.label, "key": dataclasses.asdict(bucket(wl)),
        "compiled_block_n": list(compiled), "default_plan": list(default_plan),
        "default_median_ms": statistics.median(base) if base else None,
        "rejected": [{"config": dataclasses.asdict(c), "why": why} for c, why in rejected],
        "same_plan_as_default_or_earlier": len(valid) - len(distinct), "same_plan_as": same_plan_as,
        "wrong_output": [dataclasses.asdict(c) for c in wrong],
        "not_bit_identical": [dataclasses.asdict(c) for c in not_bitwise],
        "results": results, "chosen": dataclasses.asdict(chosen),
        "speedup": best["speedup"] if adopt and best else 1.0,
    }


def _call(fc: Any, q: Any, k: Any, v: Any, causal: bool, tile: TileConfig, out: Any, lse: Any) -> Any:
    return lambda: fc.attention(q, k, v, causal=causal, tile=tile, out=out, lse=lse)


def merge_table(path: Path, table: Table) -> None:
    """Write `table` into the file at `path`, replacing the one for the same GPU and SM count (others are kept)."""
    tables = []
    if path.is_file():
        try:
            tables = [t for t in parse_tables(path.read_text(), str(path)) if not t.matches(table.gpu, table.sm_count)]
        except TableError as e:
            _say(f"the existing table does not parse ({e}); writing a new file")
    path.write_text(dump_tables([*tables, table]))


def main(argv: list[str] | None) -> int:
    if argv and argv[0] == "rekey":  # no GPU, no gate files: harness/tune/rekey.py
        from harness.tune.rekey import main as rekey_main

        return rekey_main(argv[1:])
    ap = argparse.ArgumentParser(prog="python -m harness tune", description=__doc__.splitlines()[0],
                                 epilog="python -m harness tune rekey --help: carry the tables over a kernel source "
                                        "change whose SASS is identical (harness/tune/rekey.py)")
    ap.add_argument("--gates-dir", type=Path, default=Path("gates"), help="directory of the YAML (default gates)")
    ap.add_argument("--out", help="progress directory (default reports/tune-<UTC time>)")
    ap.add_argument("--resume", help="an interrupted run's progress directory: its finished shapes are kept")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-write", action="store_true", help="measure and report, leave the table file alone")
    ap.add_argument("--no-points", action="store_true", help="skip the compile-time points (run-time knobs only)")
    ap.add_argument("--jobs", type=int, default=None, help="parallel compiles of the points (default: CPU count)")
    ap.add_argument("--build-only", action="store_true",
                    help="build and judge the points into build/tune/ and stop (no GPU needed): a later make tune "
                         "with the same kernel sources reuses them")
    args = ap.parse_args(argv)
    from harness import env
    from harness.bench.settings import load_bench_settings
    from harness.bench.timing import L2Flusher
    from harness.config import load_config
    from harness.schema import ConfigError
    from harness.support import gpu
    from harness.tune.settings import load_tune_settings

    try:
        config = load_config(args.gates_dir)
        settings = load_tune_settings(config)
        bench = load_bench_settings(config)
    except ConfigError as e:
        print(f"flashcore tune: bad gate file: {e}", file=sys.stderr)
        return 2
    if args.build_only:
        return build_only(config, settings)
    if why := gpu.cuda_unavailable_reason():
        print(f"flashcore tune: {why}", file=sys.stderr)
        return 1
    import torch

    name = torch.cuda.get_device_name()
    if why := gpu.not_hopper_reason(torch.cuda.get_device_capability(), name):
        print(f"flashcore tune: {why}", file=sys.stderr)
        return 1
    out = Path(args.resume or args.out or f"reports/tune-{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%SZ}")
    out.mkdir(parents=True, exist_ok=True)
    built = PointBuild() if args.no_points else _build_points(config, settings)
    (out / "points.json").write_text(json.dumps(built.summary(), indent=1) + "\n")
    if built.library is not None:
        os.environ["FLASHCORE_LIB"] = str(built.library)  # the defaults and every candidate point
    fc = gpu.load_flashcore()
    done = done_shapes(out) if args.resume else {}
    kernel_id = fc.api.kernel_id()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    _say(f"{name}, {sms} SMs, kernel {kernel_id}: {len(settings.workloads)} shapes, {len(done)} already done "
         f"(progress: {out / PROGRESS})")
    flush = L2Flusher(bench.timing.flush_mib)
    records = dict(done)
    t0 = time.monotonic()
    for i, wl in enumerate(settings.workloads, 1):
        if wl.name in done:
            _say(f"{i}/{len(settings.workloads)} {wl.name}: done in the earlier run, kept")
            continue
        rec = tune_shape(fc, wl, settings, bench.timing, flush, gpu.workload_seed(args.seed, "tune", wl.name),
                         tuple(built.built.get(wl.head_dim, ())))
        records[wl.name] = rec
        with (out / PROGRESS).open("a") as f:
            f.write(json.dumps(rec) + "\n")
        chosen = TileConfig(**rec["chosen"])
        tried = ", ".join(f"{TileConfig(**r['config']).label} {r['speedup']:.3f}x" if r["speedup"] else
                          f"{TileConfig(**r['config']).label} failed" for r in rec["results"])
        _say(f"{i}/{len(settings.workloads)} {wl.name} ({wl.label}) {time.monotonic() - t0:.0f}s: "
             f"{tried or 'no candidate with another plan'} -> {chosen.label}"
             + (f" ({len(rec['wrong_output'])} rejected for a wrong output)" if rec["wrong_output"] else "")
             + (f" ({len(rec['not_bit_identical'])} kept out: not bit-identical at the same block_n)"
                if rec.get("not_bit_identical") else ""))
    if any(r["wrong_output"] for r in records.values()):
        _say("some candidates changed the output: the kernel has a bug (see progress.jsonl); no table written")
        return 1
    environment = env.collect(Path.cwd())
    table = Table(name, sms, kernel_id, dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                  str(environment.get("git_commit") or ""))
    for key, recs in by_bucket(records.values()).items():
        chosen, speedup = choose(recs, settings.adopt_min_speedup)
        table.entries[key] = Entry(key, chosen, speedup)
        if len(recs) > 1:
            _say(f"{key.label}: {len(recs)} shapes weighed together -> {chosen.label} (geomean {speedup:.3f}x)")
    if args.no_write:
        _say("--no-write: table not written")
        return 0
    merge_table(Path(settings.table), table)
    _say(f"table written: {settings.table} ({len(table.entries)} entries for {name}, kernel {kernel_id})")
    used = table_points(parse_tables(Path(settings.table).read_text(), settings.table))
    write_tuned_points(TUNED_POINTS, used)
    _say(f"{TUNED_POINTS}: {sum(len(v) for v in used.values())} points the table file names besides the defaults "
         "(make build compiles them)")
    return 0


def by_bucket(records: Any) -> dict[ShapeKey, list[dict[str, Any]]]:
    """The progress records of the tuning shapes, per table bucket."""
    out: dict[ShapeKey, list[dict[str, Any]]] = {}
    for rec in records:
        out.setdefault(ShapeKey(**rec["key"]), []).append(rec)
    return out


TUNED_POINTS = Path("kernel/tuned_points.inc")


def table_points(tables: list[Table]) -> dict[int, list[Point]]:
    """The points a table file's entries name, per head dim (every GPU's table: one build serves them all)."""
    used: dict[int, list[Point]] = {}
    for t in tables:
        for e in t.entries.values():
            if e.config.point:
                pts = used.setdefault(e.key.head_dim, [])
                if (p := Point.parse(e.config.point)) not in pts:
                    pts.append(p)
    return used


def build_only(config: Any, settings: TuneSettings) -> int:
    """--build-only: the compile step alone (nvcc, no GPU); 1 when the default library is missing or the relink
    failed."""
    from flashcore import _lib

    if not _lib.library_path().is_file():
        print(f"flashcore tune: {_lib.library_path()} is missing: run make build first (make tune-build does)",
              file=sys.stderr)
        return 1
    built = _build_points(config, settings)
    if built.built and built.library is None:
        return 1
    _say(f"--build-only: {sum(len(v) for v in built.built.values())} points in {TUNE_BUILD_DIR}; make tune reuses "
         "them while the kernel sources and the space are unchanged")
    return 0


def _build_points(config: Any, settings: TuneSettings) -> PointBuild:
    """Build the space's points against the defaults of the library make build left (build/libflashcore.so)."""
    from flashcore import _lib
    from flashcore.points import library_points

    default_lib = _lib.open_library(_lib.library_path())
    defaults = {hd: library_points(default_lib, hd, defaults_only=True) for hd in settings.space.points}
    build = next(g.params for g in config.phase(1).gates if g.name == "build")
    return build_points(Path.cwd(), settings.space.points, defaults, tuple(build.serialization_codes), _say)
