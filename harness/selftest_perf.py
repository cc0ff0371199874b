"""The timed cases of `make selftest`: the perf gates, autotune-gain and scaling, each run by its own code in this
process (alone: they time the GPU) on the workloads gates/selftest.yaml trims it to, with only the backends it
judges, and with selftest.yaml's `bench` timing: merged into gates/bench.yaml and parsed by bench.yaml's own rules,
so the fewest rounds its judged minimums allow, never fewer; the gates' thresholds stay those of phases.yaml.

A gate with a regression check is judged against a stored run measured moments before (the gate's clean run, once
per self-test, its measurements file), so the case proves the check, whatever the committed stored run holds. The
control of every case is the gate's clean run against that stored run (one per gate and self-test). Plants (the
`arg` of plant "perf"):
- clean: nothing planted; a case that must pass whole (must_fail "-");
- slow: kernel fault 4 (the producer sleeps 20 us after every K/V tile): FlashCore slower, the baselines not;
- noisy: side-stream matmul bursts alongside FlashCore's calls in the later half of the rounds, which pairing cannot
  cancel: the spread must fail and no speed verdict be drawn from those pairs;
- serving-twice: every flashcore.serving call runs twice (the kernel faults do not reach the serving entry points);
- collapse: flashcore.attention runs twice on calls of at least the gate's shortest judged sequence length (a
  context collapse from there on; a kernel fault slows every length alike and leaves the ratios flat).
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import tempfile
from collections.abc import Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import yaml

from harness.results import GateResult, Status, combine
from harness.schema import Config, ConfigError, GateSpec
from harness.selftest_runs import Runner, clean_run, once, spec_of
from harness.selftest_settings import SELFTEST_FILE

PERF_PLANTS = ("clean", "slow", "noisy", "serving-twice", "collapse")
STORED = "stored"  # <report root>/<gate>-stored/: the clean run whose measurements are the stored run


def bench_settings(config: Config, override: Mapping[str, Mapping[str, Any]], out_dir: Path) -> Any:
    """gates/bench.yaml with selftest.yaml's `bench` keys in place of its own, written to out_dir/bench.yaml (the run's
    record of how it was timed) and parsed by bench.yaml's rules: a key bench.yaml lacks, or a value out of its
    bounds or below its judged minimums, is a ConfigError naming selftest.yaml's key."""
    from harness.bench.settings import BENCH_FILE, load_bench_settings

    file = config.gates_dir / SELFTEST_FILE
    raw = yaml.safe_load((config.gates_dir / BENCH_FILE).read_text())
    for section, keys in override.items():
        for key, value in keys.items():
            if not isinstance(raw.get(section), dict) or key not in raw[section]:
                raise ConfigError(file, f"bench.{section}.{key}", value, f"not a key of {BENCH_FILE} {section}")
        raw[section] = {**raw[section], **keys}
    out_dir.mkdir(parents=True, exist_ok=True)
    merged = out_dir / BENCH_FILE
    merged.write_text(yaml.safe_dump(raw, sort_keys=False))
    try:
        return load_bench_settings(config, merged)
    except ConfigError as e:
        raise ConfigError(file, f"bench.{e.key}", e.value, f"{e.why} (with {BENCH_FILE}'s other keys)") from None


def check_bench(config: Config, override: Mapping[str, Mapping[str, Any]]) -> None:
    """The override parses (before any case runs)."""
    with tempfile.TemporaryDirectory() as tmp:
        bench_settings(config, override, Path(tmp))


def timed_config(config: Config, override: Mapping[str, Mapping[str, Any]], root: Path) -> Config:
    """`config` whose bench settings are the self-test's (every gate reads them through Config.once)."""
    from harness.bench.settings import BENCH_FILE

    settings = bench_settings(config, override, root)
    cfg = dataclasses.replace(config)  # a fresh cache of the other files
    cfg.once(BENCH_FILE, lambda _: settings)
    return cfg


def trimmed_spec(config: Config, gate: str, workloads: tuple[str, ...]) -> GateSpec:
    """The gate's spec on `workloads` (when given) with only the backends it judges: a perf gate without its sweep,
    report-only workloads or unjudged baselines (the regression reference is added by the gate itself); scaling
    judged on the points of the (trimmed) sweep, with no baselines drawn beside it."""
    from harness.bench.settings import BENCH_FILE, load_bench_settings
    from harness.gates.perf import PerfParams
    from harness.gates.scaling import ScalingParams

    spec = spec_of(config, gate)
    p = spec.params
    changes: dict[str, Any] = {"workloads": workloads} if workloads else {}
    if isinstance(p, PerfParams):
        changes |= {"sweep": False, "baselines": p.gated, "report_workloads": ()}
    if isinstance(p, ScalingParams):
        seqlens = config.once(BENCH_FILE, lambda _: load_bench_settings(config)).sweep.seqlens
        judged = tuple(s for s in p.judged_seqlens if s in seqlens)
        if not judged:
            raise ValueError(f"{SELFTEST_FILE} bench.sweep.seqlens {list(seqlens)} keeps none of {gate}'s "
                             f"judged_seqlens {list(p.judged_seqlens)}")
        changes |= {"baselines": (), "judged_seqlens": judged,
                    "peak_seqlens": tuple(s for s in p.peak_seqlens if s in seqlens)}
    return dataclasses.replace(spec, params=dataclasses.replace(p, **changes))


def plant_of(plant: str, spec: GateSpec) -> AbstractContextManager[None]:
    from harness.planted_checks import planted

    if plant == "serving-twice":
        return planted("run-twice:serving")
    if plant == "collapse":
        return planted(f"run-twice:{min(spec.params.judged_seqlens)}")
    return contextlib.nullcontext()


def timed_gate(config: Config, spec: GateSpec, run_dir: Path, plant: str, stored: Path | None) -> GateResult:
    """The gate's own run with `plant` (kernel fault 4 for `slow`); a perf gate against `stored`. Its report is
    written to run_dir."""
    from harness import env
    from harness.bench.backends import SLOW_FAULT
    from harness.gates import perf, registry
    from harness.gates.base import GateContext
    from harness.render import write_all
    from harness.results import RunResult

    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    ctx = GateContext(spec=spec, config=config, run_dir=run_dir, repo_root=Path.cwd(), seed=0,
                      fault=SLOW_FAULT if plant == "slow" else 0)
    gate = registry.get(spec.name)
    assert gate is not None, spec.name
    with plant_of(plant, spec):
        if plant == "noisy" or getattr(spec.params, "regression", False):
            result = perf.run_perf(ctx, noisy=plant == "noisy", stored_path=stored)
        else:
            result = gate().run(ctx)
    notice = f"PLANTED ({plant}, test-only): {spec.name} must fail" if plant != "clean" else ""
    write_all(RunResult(run_dir.name, spec.phase, (result,), env.collect(Path.cwd()), "", 0.0, notice=notice),
              run_dir)
    return result


def statuses(gate: str, result: GateResult, plant: str) -> dict[str, Status]:
    """The gate's status, and its parts where it has them: `gate/spread` (the paired ratios' rel_std checks; ERROR
    when a speed verdict was drawn from a pair whose spread failed: a verdict from noise is a bug) and
    `gate/regression` (slowdown_vs_stored)."""
    spread = [c for c in result.checks if c.metric.startswith("rel_std")]
    regression = [c.status for c in result.checks if c.metric == "slowdown_vs_stored"]
    out = {gate: result.status}
    if spread:
        noisy = {c.workload for c in spread if c.status is Status.FAIL}
        judged = [c for c in result.checks if c.workload in noisy and not c.metric.startswith("rel_std")
                  and c.status in (Status.PASS, Status.FAIL)]
        out[f"{gate}/spread"] = Status.ERROR if judged else combine([c.status for c in spread])
    if regression:
        out[f"{gate}/regression"] = combine(regression)
    print(f"  {gate} ({plant}): {', '.join(f'{k} {s.value}' for k, s in out.items())}: {result.message}",
          file=sys.stderr)
    return out


def stored_run(config: Config, spec: GateSpec, run_dir: Path, reruns: int) -> Path:
    """The measurements file of the clean run a case's regression checks compare with, measured again (up to
    `reruns` times) while its own spread check is red: a stored ratio spreading past the gate's limit makes every
    regression check an ERROR ("re-store the baseline"), the control's as the fault's, and proves nothing of the
    gate (on the H200 the first timed run of a share read 2.32 %, limit 2 %, where its control read under 2 %)."""
    last: dict[str, Any] = {}

    def run(path: Path) -> dict[str, Status]:
        last["path"], last["result"] = path, timed_gate(config, spec, path, "clean", None)
        return statuses(spec.name, last["result"], "stored")

    clean_run(run, run_dir, reruns)
    return last["path"] / str(last["result"].details.get("measurements_file", "missing.json"))


def perf_case(gate: str, plant: str, workloads: tuple[str, ...], override: Mapping[str, Mapping[str, Any]],
              reruns: int = 0) -> Runner:
    """The runner of a timed case: planted, the gate with `plant` (against the stored run when it has a regression
    check); the control (and a `clean` case), the gate's clean run against the same stored run. The stored run is
    measured again while its spread alone is red (`reruns`, selftest.yaml spread_reruns)."""
    if plant not in PERF_PLANTS:
        raise ValueError(f"gate {gate}: no timed plant {plant!r} (known: {', '.join(PERF_PLANTS)})")

    def run(config: Config, out: Path, planted: bool) -> dict[str, Status]:
        root = out.parent
        cfg = once(("timed-config", root), lambda: timed_config(config, override, root))
        spec = once(("timed-spec", root, gate, workloads), lambda: trimmed_spec(cfg, gate, workloads))
        stored = None
        if getattr(spec.params, "regression", False):
            stored = once((STORED, root, gate, workloads),
                          lambda: stored_run(cfg, spec, root / f"{gate}-{STORED}", reruns))
        if not planted or plant == "clean":
            clean = once(("timed-clean", root, gate, workloads),
                         lambda: timed_gate(cfg, spec, root / f"{gate}-clean", "clean", stored))
            return statuses(gate, clean, "clean")
        return statuses(gate, timed_gate(cfg, spec, out, plant, stored), plant)

    return run
