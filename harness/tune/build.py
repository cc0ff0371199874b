"""make tune's compile step: the space's compile-time points checked (flashcore/points.py), the valid ones the
default library lacks built in parallel into build/tune/ (kernel/kernel.mk: one object per point), then each judged
by its ptxas report: a point that spills or serializes wgmma is dropped with the reason, and the library is linked
with the survivors. The tuner then loads build/tune/libflashcore.so, which holds the defaults and every surviving
candidate. make's file times decide what is compiled: a second run over the same sources compiles nothing (make
tune-build runs this step alone, on any host with nvcc)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from flashcore.points import Point
from harness.support.ptxas import parse_ptxas

TUNE_BUILD_DIR = Path("build/tune")
POINTS_FILE = "points.inc"
CANDIDATES_FILE = "candidates.inc"  # every point to compile (their objects only)
CANDIDATES_HEADER = "make tune's candidates (harness/tune/build.py)"
SURVIVORS_HEADER = "make tune's candidates that compiled clean (harness/tune/build.py): the library's points"


@dataclass
class PointBuild:
    """What happened to the space's points: built (per head dim), rejected with the rule (before or after the
    compile), already compiled in the default library."""

    built: dict[int, list[Point]] = field(default_factory=dict)
    rejected: list[tuple[int, Point, str]] = field(default_factory=list)
    defaults: dict[int, list[Point]] = field(default_factory=dict)
    library: Path | None = None
    seconds: float = 0.0

    def summary(self) -> dict[str, object]:
        return {"built": {str(hd): [p.name for p in pts] for hd, pts in self.built.items()},
                "defaults": {str(hd): [p.name for p in pts] for hd, pts in self.defaults.items()},
                "rejected": [{"head_dim": hd, "point": p.name, "why": why} for hd, p, why in self.rejected],
                "library": str(self.library) if self.library else None, "seconds": round(self.seconds, 1)}


def object_stem(head_dim: int, p: Point) -> str:
    """kernel/kernel.mk's object name for a point: p<hd>_<block_n>_<stages>_<wgs>_<pp>_<re>_<regs>."""
    return "p" + "_".join(str(f) for f in p.fields(head_dim))


def write_points_file(path: Path, points: Mapping[int, list[Point]], header: str) -> None:
    """Write the points file; an existing file with the same text is left alone, so its time stays and make rebuilds
    nothing that depends on it (the library's dispatch object: a single nvcc run of ~100 s)."""
    lines = [f"// {line}" for line in header.splitlines()]
    lines += [p.inc_line(hd) for hd in sorted(points) for p in points[hd]]
    text = "\n".join(lines) + "\n"
    if not (path.is_file() and path.read_text() == text):
        path.write_text(text)


def ptxas_problems(log: str, forbidden_codes: tuple[str, ...]) -> list[str]:
    """Why a point's ptxas report disqualifies it: spills, wgmma serialization diagnostics."""
    report = parse_ptxas(log)
    out = [f"ptxas: {f.spill_bytes} bytes spilled in {f.name[:60]}" for f in report.entries if f.spill_bytes]
    out += [f"ptxas: {d.code} (wgmma serialized)" for d in report.diagnostics if d.code in forbidden_codes]
    return out


def plan_points(space: Mapping[int, tuple[Point, ...]], defaults: Mapping[int, tuple[Point, ...]],
                ) -> PointBuild:
    """Split the space into points to build, points rejected by their rules, and defaults (nothing to build)."""
    result = PointBuild()
    for hd, pts in space.items():
        for p in dict.fromkeys(pts):
            if p in defaults.get(hd, ()):
                result.defaults.setdefault(hd, []).append(p)
            elif why := p.problems(hd):
                result.rejected.append((hd, p, "; ".join(why)))
            else:
                result.built.setdefault(hd, []).append(p)
    return result


def _make(repo: Path, build_dir: Path, points_file: Path, targets: list[Path], jobs: int, say: Callable[[str], None],
          keep_going: bool) -> int:
    cmd = ["make", f"-j{jobs}", *(["-k"] if keep_going else []), f"BUILD_DIR={build_dir}",
           f"POINTS_FILE={points_file}", *(str(t) for t in targets)]
    log = build_dir / "make.log"
    started = time.monotonic()
    with log.open("a") as f, subprocess.Popen(cmd, cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                              text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            f.write(line)
            if m := re.search(r"-o \S*/points/(p[\d_]+)\.o", line):
                say(f"compiling {m[1]} ({time.monotonic() - started:.0f}s)")
        return proc.wait()


def build_points(repo: Path, space: Mapping[int, tuple[Point, ...]], defaults: Mapping[int, tuple[Point, ...]],
                 forbidden_codes: tuple[str, ...], say: Callable[[str], None], jobs: int | None = None) -> PointBuild:
    """Check, build and judge the space's points; the library under build/tune/ (None when nothing was built)."""
    started = time.monotonic()
    result = plan_points(space, defaults)
    for hd, p, why in result.rejected:
        say(f"rejected before the build: d{hd} {p.name}: {why}")
    if not result.built:
        say("no point to build: the space holds defaults and rejected points only")
        return result
    build_dir = repo / TUNE_BUILD_DIR
    build_dir.mkdir(parents=True, exist_ok=True)
    points_file = build_dir / POINTS_FILE
    jobs = jobs or os.cpu_count() or 2
    n = sum(len(v) for v in result.built.values())
    say(f"building {n} points with make -j{jobs} into {TUNE_BUILD_DIR} (log: {TUNE_BUILD_DIR}/make.log)")
    # The point objects first, on their own: the library's dispatch object (flashcore.o, one nvcc run of ~100 s)
    # depends on the points file, so it is compiled once, for the survivors, and not at all when they are the
    # survivors of the last run (make tune-build's, say) and every object is current.
    candidates = build_dir / CANDIDATES_FILE
    write_points_file(candidates, result.built, CANDIDATES_HEADER)
    objects = [build_dir / "points" / f"{object_stem(hd, p)}.o" for hd, pts in result.built.items() for p in pts]
    _make(repo, build_dir, candidates, objects, jobs, say, keep_going=True)
    survivors: dict[int, list[Point]] = {}
    for hd, pts in result.built.items():
        for p in pts:
            stem = object_stem(hd, p)
            obj, log = build_dir / "points" / f"{stem}.o", build_dir / "points" / f"{stem}.ptxas.log"
            text = log.read_text(errors="replace") if log.is_file() else ""
            if not obj.is_file():
                tail = " | ".join(text.strip().splitlines()[-3:])[:300]
                result.rejected.append((hd, p, f"compile failed: {tail or 'see make.log'}"))
            elif bad := ptxas_problems(text, forbidden_codes):
                result.rejected.append((hd, p, "; ".join(bad)))
            else:
                survivors.setdefault(hd, []).append(p)
                continue
            say(f"rejected after the build: d{hd} {p.name}: {result.rejected[-1][2]}")
    result.built = survivors
    if survivors:
        write_points_file(points_file, survivors, SURVIVORS_HEADER)  # untouched when the survivors did not change
        if _make(repo, build_dir, points_file, [build_dir / "libflashcore.so"], jobs, say, keep_going=False) != 0:
            print(f"[tune] relinking {TUNE_BUILD_DIR} failed: see {TUNE_BUILD_DIR}/make.log", file=sys.stderr)
        else:
            result.library = build_dir / "libflashcore.so"
    result.seconds = time.monotonic() - started
    say(f"{sum(len(v) for v in survivors.values())} points built clean in {result.seconds:.0f}s")
    return result


TUNED_POINTS_HEADER = """Points compiled besides each head dim's defaults (kernel/tile_point.h): those the tuned table
names (flashcore/tuned.yaml). Written by make tune; not part of fc_kernel_id (adding a point changes no kernel code).
FC_POINT(head_dim, block_n, stages, consumer_wgs, pingpong, rescale_early, producer_regs)"""


def write_tuned_points(path: Path, used: Mapping[int, list[Point]]) -> None:
    """kernel/tuned_points.inc: the non-default points the table file names, for make build."""
    write_points_file(path, used, TUNED_POINTS_HEADER)
