"""`python -m harness.sanitizer.cost_fit RESULTS [--check RESULTS ...]`: refit gates/sanitizer-cost.yaml.

Fits seconds = start_s + base_s * workloads + s_per_g_scores * scores / 10^9 per tool (harness/sanitizer/cost.py)
by least squares, every coefficient >= 0, to the compute-sanitizer processes of a gate run's results: each run alone
(details.runs with its wall_s) and each batch of several workloads (details.batches), from a .json or .json.xz. Prints
the `tools:` block to paste into the YAML. The start and the per-workload base can be told apart only by batches of
different sizes: runs made one per process leave them one constant, which the fit gives the base (start_s 0).
`--check` prints how well the fitted (or, without RESULTS, the shipped) model predicts other runs: mean absolute
error and R^2 as fitted, and after one common scale (a run with other runs at once per worker is uniformly faster or
slower: the dealing and ordering need only the ratios). Processes that timed out have no duration and are left out.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from harness.sanitizer.cost import CostModel, ToolCost, load_cost_model, scores
from harness.sanitizer.model import TOOLS
from harness.schema import ConfigError, Workload

Sample = tuple[str, int, float, float]  # (tool, workloads in the process, their score elements / 10^9, wall seconds)


def _timed(r: Any) -> bool:
    return isinstance(r, dict) and r.get("tool") in TOOLS and isinstance(r.get("wall_s"), int | float) \
        and not isinstance(r.get("wall_s"), bool) and not r.get("timed_out")


def samples_from(runs: Sequence[Any], workloads: Mapping[str, Workload], batches: Sequence[Any] = ()) -> list[Sample]:
    """The timed processes of a sanitizer gate's details: each run alone among `runs` and each clean batch of
    `batches`, whose workloads are all still defined, each workload at the shape it ran (a reduced racecheck's
    `reduced` batch and heads, as its run records it)."""
    ran = {(r["tool"], r["workload"]): r for r in runs if isinstance(r, dict) and "tool" in r and "workload" in r}

    def g(tool: str, name: str) -> float:
        return scores(ran_shape(ran.get((tool, name), {}), workloads[name])) / 1e9

    out = [(r["tool"], 1, g(r["tool"], r["workload"]), float(r["wall_s"])) for r in runs
           if _timed(r) and r.get("workload") in workloads]
    for b in batches:  # a batch that was not clean may have stopped before its last workload: not a full batch
        names = b.get("workloads") if isinstance(b, dict) else None
        if _timed(b) and b.get("status") == "pass" and isinstance(names, list) and names \
                and all(n in workloads for n in names):
            out.append((b["tool"], len(names), sum(g(b["tool"], n) for n in names), float(b["wall_s"])))
    return out


def ran_shape(run: Mapping[str, Any], wl: Workload) -> Workload:
    """`wl` with the batch and heads the run's `reduced` record names (harness/sanitizer/runs.py), else `wl`."""
    got = run.get("reduced")
    if not isinstance(got, dict):
        return wl
    dims = {k: got[k] for k in ("batch", "heads_q", "heads_kv") if isinstance(got.get(k), int) and got[k] > 0}
    return dataclasses.replace(wl, **dims)


def samples(path: Path, workloads: Mapping[str, Workload]) -> list[Sample]:
    """Every timed compute-sanitizer process of the stored run at `path`."""
    from harness.render.stored import read_run

    details = [g.details or {} for g in read_run(path).gates]
    got = [s for d in details for s in samples_from(d.get("runs") or [], workloads, d.get("batches") or [])]
    if not got:  # a run without sanitizer gates (a perf-only one): nothing to fit or predict
        raise ValueError(f"{path}: no timed compute-sanitizer run in it")
    return got


def _solve(a: list[list[float]], b: list[float]) -> list[float] | None:
    """x of a x = b by Gaussian elimination with partial pivoting; None when `a` is (nearly) singular."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    scale = max((abs(v) for row in a for v in row), default=0.0) or 1.0
    for c in range(n):
        piv = max(range(c, n), key=lambda r: abs(m[r][c]))
        if abs(m[piv][c]) <= 1e-12 * scale:
            return None
        m[c], m[piv] = m[piv], m[c]
        for r in range(n):
            if r != c:
                f = m[r][c] / m[c][c]
                m[r] = [x - f * y for x, y in zip(m[r], m[c], strict=True)]
    return [m[i][n] / m[i][i] for i in range(n)]


def fit_tool(rows: Sequence[tuple[float, float, float]], ys: Sequence[float]) -> tuple[float, float, float]:
    """(start, base, slope) of y = start + base * n + slope * g (rows: (1, n, g)) by least squares, each >= 0: the
    best of the fits over every subset of the three terms whose coefficients all come out >= 0. Among equal fits the
    one with the base wins (runs one per process cannot tell the start from the base)."""
    best: tuple[float, tuple[float, float, float]] | None = None
    for k in (3, 2, 1):
        for cols in itertools.combinations((1, 0, 2), k):  # the base's column first: it wins the ties
            ata = [[sum(r[i] * r[j] for r in rows) for j in cols] for i in cols]
            aty = [sum(r[i] * y for r, y in zip(rows, ys, strict=True)) for i in cols]
            x = _solve(ata, aty)
            if x is None or min(x) < 0:
                continue
            coef = [0.0, 0.0, 0.0]
            for c, v in zip(cols, x, strict=True):
                coef[c] = v
            sse = sum((coef[0] + coef[1] * r[1] + coef[2] * r[2] - y) ** 2 for r, y in zip(rows, ys, strict=True))
            if best is None or sse < best[0] - 1e-9 * (1 + best[0]):
                best = (sse, (coef[0], coef[1], coef[2]))
    start, base, slope = best[1] if best is not None else (0.0, sum(ys) / len(ys), 0.0)
    return start, max(base, 0.01), slope  # the YAML asks base_s > 0: no workload is free


def fit(data: Sequence[Sample]) -> CostModel:
    tools: dict[str, ToolCost] = {}
    for tool in TOOLS:
        mine = [(1.0, float(n), x, y) for t, n, x, y in data if t == tool]
        if not mine:
            raise ValueError(f"no timed {tool} run to fit")
        tools[tool] = ToolCost(*fit_tool([r[:3] for r in mine], [r[3] for r in mine]))
    return CostModel(MappingProxyType(tools))


def predict(model: CostModel, tool: str, n: int, x: float) -> float:
    c = model.tools[tool]
    return c.start_s + c.base_s * n + c.s_per_g_scores * x


def quality(model: CostModel, data: Sequence[Sample], scale: float = 1.0) -> tuple[float, float]:
    """(mean absolute error in seconds, R^2) of the model times `scale` over `data`."""
    err = [predict(model, t, n, x) * scale - y for t, n, x, y in data]
    ys = [y for *_, y in data]
    my = sum(ys) / len(ys)
    tot = sum((y - my) ** 2 for y in ys)
    return sum(abs(e) for e in err) / len(err), 1 - sum(e * e for e in err) / tot if tot else 0.0


def common_scale(model: CostModel, data: Sequence[Sample]) -> float:
    """The one factor that maps the model's total onto the runs' measured total."""
    return sum(y for *_, y in data) / sum(predict(model, t, n, x) for t, n, x, _ in data)


def block(model: CostModel) -> str:
    lines = ["tools:"] + [f"  {t}: {{start_s: {c.start_s:.2f}, base_s: {c.base_s:.2f}, "
                          f"s_per_g_scores: {c.s_per_g_scores:.3f}}}" for t, c in model.tools.items()]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.sanitizer.cost_fit", description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, nargs="?", help="the run to fit (default: check the shipped model)")
    ap.add_argument("--check", type=Path, nargs="*", default=[], help="runs to predict with the model")
    ap.add_argument("--gates-dir", type=Path, default=Path("gates"))
    args = ap.parse_args(argv)
    from harness.config import load_config
    from harness.render.stored import StoredRunError

    workloads = load_config(args.gates_dir).workloads
    try:
        if args.results is not None:
            data = samples(args.results, workloads)
            model = fit(data)
            mae, r2 = quality(model, data)
            sys.stdout.write(block(model))
            print(f"# fitted to {len(data)} processes of {args.results}: mean abs error {mae:.2f} s, R^2 {r2:.3f}",
                  file=sys.stderr)
        else:
            model = load_cost_model(args.gates_dir / "sanitizer-cost.yaml")
        for path in args.check:
            data = samples(path, workloads)
            scale = common_scale(model, data)
            (mae, r2), (smae, sr2) = quality(model, data), quality(model, data, scale)
            print(f"# {path}: {len(data)} processes: as fitted mean abs error {mae:.2f} s, R^2 {r2:.3f}; "
                  f"times {scale:.2f}: {smae:.2f} s, R^2 {sr2:.3f}", file=sys.stderr)
    except (StoredRunError, ConfigError, ValueError, OSError) as e:
        print(f"python -m harness.sanitizer.cost_fit: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
