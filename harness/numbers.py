"""`python -m harness numbers`: README's table of current numbers, written from the newest stored phase run.

load the gates -> pick the newest stored run of the last phase that holds every paired perf gate -> one row per
gate (FlashCore's paired speed / the baseline's: geometric mean, worst and best workload, the gate's bar and
verdict) -> print it, or write it between README's markers (--write), or exit 1 when README's differs (--check).

The table is only ever what a committed run says, with its commit and GPU named: README cannot quote a number that
no evidence holds, and tests/test_readme_numbers.py fails when new evidence makes README's table stale.
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from harness.config import load_config
from harness.render.stored import StoredRunError, read_run
from harness.results import Check, GateResult, RunResult, Status
from harness.schema import ConfigError

BEGIN = "<!-- numbers: begin (python -m harness numbers --write README.md writes this block) -->"
END = "<!-- numbers: end -->"
WIDTH = 116  # README's prose width (its tables' rows are as wide as they need)
EXIT_STALE = 1
EXIT_UNUSABLE = 2
# Baselines named after FlashCore itself (autotune-gain's "flashcore-default") time FlashCore against its own
# untuned tiles: a gain of the tuned table, not a comparison with another implementation, so not in this table.
OWN_BACKEND_PREFIX = "flashcore"


class NumbersError(ValueError):
    """No usable evidence, or a file without the markers: the message says which and what to do."""


@dataclass(frozen=True)
class Row:
    gate: str
    against: str
    workloads: int
    geomean: float | None  # the gate's judged geometric mean; None where the gate judges none
    geomean_of: str  # over how many workloads, as the check names it (the gate's own set, without sweep points)
    worst: tuple[str, float] | None
    best: tuple[str, float] | None
    bar: str
    verdict: str


def perf_gates(gates_dir: Path) -> tuple[int, tuple[str, ...]]:
    """(the last phase, the gates through it that judge FlashCore's speed against another implementation)."""
    last, names, _ = _phase_gates(gates_dir)
    return last, names


def _phase_gates(gates_dir: Path) -> tuple[int, tuple[str, ...], int]:
    """perf_gates, and how many gates the last phase's run has in all (one read of the YAML)."""
    config = load_config(gates_dir)
    last = max(p.number for p in config.phases)
    gates = config.gates_through(last)
    names = tuple(g.name for g in gates
                  if any(not b.startswith(OWN_BACKEND_PREFIX) for b in getattr(g.params, "gated", ()) or ()))
    return last, names, len(gates)


def _started(run: RunResult) -> datetime:
    try:
        return datetime.fromisoformat(run.started_at.replace("Z", "+00:00"))
    except ValueError:
        return datetime.min.replace(tzinfo=UTC)  # undated: older than any dated run


def latest_run(evidence_dir: Path, phase: int, gates: Iterable[str]) -> tuple[Path, RunResult]:
    """The stored run of `phase` with every one of `gates` that started last (files that are not stored runs, or
    are partial runs such as a re-run of one gate, are passed over)."""
    wanted = set(gates)
    found: list[tuple[datetime, str, Path, RunResult]] = []
    for path in sorted(evidence_dir.glob("*.json*")):
        if not path.name.endswith((".json", ".json.xz")):
            continue
        try:
            run = read_run(path)
        except StoredRunError:
            continue
        if run.phase == phase and wanted <= {g.name for g in run.gates}:
            found.append((_started(run), path.name, path, run))
    if not found:
        raise NumbersError(f"{evidence_dir}: no stored phase-{phase} run holds every perf gate "
                           f"({', '.join(sorted(wanted))}); commit a make gate-phase{phase} results.json there")
    _, _, path, run = max(found, key=lambda f: (f[0], f[1]))
    return path, run


def _label(gate: GateResult, backend: str) -> str:
    for workload in gate.details.get("workloads") or []:
        for row in workload.get("rows") or []:
            if row.get("backend") == backend and row.get("label"):
                return str(row["label"])
    return backend


def _ratio(value: float) -> str:
    return f"{value:.3f}x"


def _threshold(value: float) -> str:
    return f"{value:.2f}x"


def gate_rows(gate: GateResult) -> list[Row]:
    """One row per baseline the gate judges (its checks speed_vs_<backend> and geomean_speed_vs_<backend>)."""
    rows = []
    for backend in gate.details.get("gated") or []:
        if str(backend).startswith(OWN_BACKEND_PREFIX):
            continue
        speed = [c for c in gate.checks if c.metric == f"speed_vs_{backend}"]
        geo = [c for c in gate.checks if c.metric == f"geomean_speed_vs_{backend}"]
        measured = sorted((c.measured, c.workload) for c in speed if c.measured is not None)
        bar = _bar(speed, geo)
        rows.append(Row(gate=gate.name, against=_label(gate, str(backend)), workloads=len(speed),
                        geomean=geo[0].measured if geo else None,
                        geomean_of=m.group(1) if geo and (m := re.search(r"over (\d+)", geo[0].workload)) else "",
                        worst=(measured[0][1], measured[0][0]) if measured else None,
                        best=(measured[-1][1], measured[-1][0]) if measured else None,
                        bar=bar, verdict=gate.status.value))
    return rows


def _bar(speed: list[Check], geo: list[Check]) -> str:
    parts = []
    each = {c.threshold for c in speed if c.threshold is not None}
    if len(each) == 1:
        parts.append(f">= {_threshold(each.pop())} each")
    if geo and geo[0].threshold is not None:
        parts.append(f">= {_threshold(geo[0].threshold)} geomean")
    return ", ".join(parts) or "-"


def _gpu(run: RunResult, gates: list[GateResult]) -> str:
    """The GPU that measured the perf gates (a sharded run records it per gate), else the run's."""
    names = sorted({str(g.details["gpu"]["name"]) for g in gates
                    if isinstance(g.details.get("gpu"), dict) and g.details["gpu"].get("name")})
    return ", ".join(names) or str(run.environment.get("gpu") or "unknown GPU")


def _counts(run: RunResult) -> str:
    order = [Status.PASS, Status.FAIL, Status.ERROR, Status.NOT_RUN, Status.NOT_APPLICABLE]
    counts = {s: sum(g.status is s for g in run.gates) for s in order}
    return ", ".join(f"{n} {s.value.replace('_', ' ')}" for s, n in counts.items() if n)


def render_block(run: RunResult, shown_path: str, gate_names: Iterable[str], phase_gates: int = 0) -> str:
    """The Markdown between the markers: where the numbers come from, then the table. `phase_gates`: how many gates
    the whole phase run has; a stored run of fewer (the perf gates alone, `--only`) says so."""
    names = list(gate_names)
    gates = [g for g in run.gates if g.name in names]
    commit = str(run.environment.get("git_commit") or "unknown")[:7]
    if run.environment.get("git_dirty"):
        commit += " (dirty tree)"
    day = run.started_at[:10] or "undated"
    source = f"`make gate-phase{run.phase}`"
    if 0 < len(run.gates) < phase_gates:
        source = f"{len(run.gates)} of the {phase_gates} gates of {source} (`--only`)"
    header = (f"{source} at {commit} on {_gpu(run, gates)}, {day}: {run.status.value} "
              f"({_counts(run)}; `{shown_path}`). FlashCore's speed / the baseline's, paired per workload:")
    lines = [*textwrap.wrap(header, WIDTH, break_long_words=False, break_on_hyphens=False), "",
             "| gate | against | workloads | geomean | worst | best | bar | verdict |",
             "|---|---|---|---|---|---|---|---|"]
    for gate in gates:
        for r in gate_rows(gate):
            lines.append("| " + " | ".join([
                f"`{r.gate}`", r.against, str(r.workloads), _geomean(r),
                f"{_ratio(r.worst[1])} {r.worst[0]}" if r.worst else "-",
                f"{_ratio(r.best[1])} {r.best[0]}" if r.best else "-", r.bar, r.verdict]) + " |")
    return "\n".join(lines)


def _geomean(row: Row) -> str:
    if row.geomean is None:
        return "-"
    return _ratio(row.geomean) + (f" of {row.geomean_of}" if row.geomean_of else "")


def replace_block(text: str, block: str, where: str = "README.md") -> str:
    """`text` with the lines between BEGIN and END replaced by `block`."""
    start, stop = text.find(BEGIN), text.find(END)
    if start < 0 or stop < start:
        raise NumbersError(f"{where}: no '{BEGIN}' ... '{END}' block to write the numbers into")
    return text[:start + len(BEGIN)] + "\n" + block + "\n" + text[stop:]


def current_block(evidence_dir: Path, gates_dir: Path, shown_root: Path | None = None) -> str:
    """The block for the newest evidence; paths shown relative to `shown_root` when given."""
    phase, names, phase_gates = _phase_gates(gates_dir)
    path, run = latest_run(evidence_dir, phase, names)
    shown = path.resolve().relative_to(shown_root.resolve()) if shown_root else path
    return render_block(run, shown.as_posix(), names, phase_gates)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness numbers", description="README's table of current numbers, "
                                 "from the newest stored phase run under the evidence directory")
    ap.add_argument("--evidence", type=Path, default=Path("reports/evidence"), help="default reports/evidence")
    ap.add_argument("--gates-dir", type=Path, default=Path("gates"))
    what = ap.add_mutually_exclusive_group()
    what.add_argument("--write", type=Path, metavar="FILE", help="replace FILE's numbers block (README.md)")
    what.add_argument("--check", type=Path, metavar="FILE", help="exit 1 when FILE's numbers block is not current")
    args = ap.parse_args(argv)
    try:
        block = current_block(args.evidence, args.gates_dir)
        target = args.write or args.check
        if target is None:
            print(block)
            return 0
        text = target.read_text()
        new = replace_block(text, block, str(target))
    except (NumbersError, ConfigError, OSError) as e:
        print(f"flashcore harness: {e}", file=sys.stderr)
        return EXIT_UNUSABLE
    if args.check:
        if new != text:
            print(f"{target}: the numbers block is not the newest evidence's: run python -m harness numbers "
                  f"--write {target}", file=sys.stderr)
            return EXIT_STALE
        print(f"{target}: the numbers block is current")
        return 0
    target.write_text(new)
    print(f"{target}: numbers block written")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
