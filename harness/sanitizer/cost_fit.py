"""`python -m harness.sanitizer.cost_fit RESULTS [--check RESULTS ...]`: refit gates/sanitizer-cost.yaml.

Fits seconds = base_s + s_per_g_scores * scores / 10^9 per tool (harness/sanitizer/cost.py) by least squares to the
compute-sanitizer runs of a gate run's results (details.runs of every sanitizer gate: tool, workload, wall_s; .json
or .json.xz) and prints the `tools:` block to paste into the YAML. `--check` prints how well the fitted (or, without
RESULTS, the shipped) model predicts other runs: mean absolute error and R^2 as fitted, and after one common scale
(a run with other runs at once per worker is uniformly faster or slower: the dealing and ordering need only the
ratios). Runs that timed out have no duration and are left out.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from harness.sanitizer.cost import CostModel, ToolCost, load_cost_model, scores
from harness.sanitizer.model import TOOLS
from harness.schema import ConfigError, Workload

Sample = tuple[str, float, float]  # (tool, score elements / 10^9, wall seconds)


def samples_from(runs: Sequence[Any], workloads: Mapping[str, Workload]) -> list[Sample]:
    """The timed runs among `runs` (a sanitizer gate's details.runs) whose workload is still defined, each at the
    shape it ran (a reduced racecheck's `reduced` batch and heads)."""
    return [(r["tool"], scores(ran_shape(r, workloads[r["workload"]])) / 1e9, float(r["wall_s"])) for r in runs
            if isinstance(r, dict) and r.get("tool") in TOOLS and r.get("workload") in workloads
            and isinstance(r.get("wall_s"), int | float) and not r.get("timed_out")]


def ran_shape(run: Mapping[str, Any], wl: Workload) -> Workload:
    """`wl` with the batch and heads the run's `reduced` record names (harness/gates/sanitizer.py), else `wl`."""
    got = run.get("reduced")
    if not isinstance(got, dict):
        return wl
    dims = {k: got[k] for k in ("batch", "heads_q", "heads_kv") if isinstance(got.get(k), int) and got[k] > 0}
    return dataclasses.replace(wl, **dims)


def samples(path: Path, workloads: Mapping[str, Workload]) -> list[Sample]:
    """Every timed compute-sanitizer run of the stored run at `path`."""
    from harness.render.stored import read_run

    got = [s for g in read_run(path).gates for s in samples_from((g.details or {}).get("runs") or [], workloads)]
    if not got:  # a run without sanitizer gates (a perf-only one): nothing to fit or predict
        raise ValueError(f"{path}: no timed compute-sanitizer run in it")
    return got


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """(a, b) of y = a + b x by least squares, both kept >= 0 (a run never gets cheaper with size); a slope that
    comes out negative is 0 with the mean as the base."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx > 0 else 0.0
    if b <= 0:
        return my, 0.0
    a = my - b * mx
    if a <= 0:  # through the origin instead, with a base just above 0 (the YAML asks base_s > 0)
        return 0.01, sum(x * y for x, y in zip(xs, ys, strict=True)) / sum(x * x for x in xs)
    return a, b


def fit(data: Sequence[Sample]) -> CostModel:
    tools: dict[str, ToolCost] = {}
    for tool in TOOLS:
        xs = [x for t, x, _ in data if t == tool]
        ys = [y for t, _, y in data if t == tool]
        if not xs:
            raise ValueError(f"no timed {tool} run to fit")
        tools[tool] = ToolCost(*fit_line(xs, ys))
    return CostModel(MappingProxyType(tools))


def predict(model: CostModel, tool: str, x: float) -> float:
    c = model.tools[tool]
    return c.base_s + c.s_per_g_scores * x


def quality(model: CostModel, data: Sequence[Sample], scale: float = 1.0) -> tuple[float, float]:
    """(mean absolute error in seconds, R^2) of the model times `scale` over `data`."""
    err = [predict(model, t, x) * scale - y for t, x, y in data]
    ys = [y for *_, y in data]
    my = sum(ys) / len(ys)
    tot = sum((y - my) ** 2 for y in ys)
    return sum(abs(e) for e in err) / len(err), 1 - sum(e * e for e in err) / tot if tot else 0.0


def common_scale(model: CostModel, data: Sequence[Sample]) -> float:
    """The one factor that maps the model's total onto the runs' measured total."""
    return sum(y for *_, y in data) / sum(predict(model, t, x) for t, x, _ in data)


def block(model: CostModel) -> str:
    lines = ["tools:"] + [f"  {t}: {{base_s: {c.base_s:.2f}, s_per_g_scores: {c.s_per_g_scores:.3f}}}"
                          for t, c in model.tools.items()]
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
            print(f"# fitted to {len(data)} runs of {args.results}: mean abs error {mae:.2f} s, R^2 {r2:.3f}",
                  file=sys.stderr)
        else:
            model = load_cost_model(args.gates_dir / "sanitizer-cost.yaml")
        for path in args.check:
            data = samples(path, workloads)
            scale = common_scale(model, data)
            (mae, r2), (smae, sr2) = quality(model, data), quality(model, data, scale)
            print(f"# {path}: {len(data)} runs: as fitted mean abs error {mae:.2f} s, R^2 {r2:.3f}; times {scale:.2f}: "
                  f"{smae:.2f} s, R^2 {sr2:.3f}", file=sys.stderr)
    except (StoredRunError, ConfigError, ValueError, OSError) as e:
        print(f"python -m harness.sanitizer.cost_fit: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
