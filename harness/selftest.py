"""`python -m harness selftest` (make selftest, GPU host): prove that each gate can fail.

Each case plants one fault and names the gate that must turn red; a clean run must stay green. A gate declares its
own cases (`selftests` on its class, harness/gates/base.py SelfTest); this module knows how to plant each kind.
Exit 0 only when every expectation held. Results go to reports/selftest-<time>/<case>/.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from flashcore.faults import Fault
from harness.config import load_config
from harness.gates.base import SelfTest
from harness.results import Status
from harness.schema import Config

Runner = Callable[[Config, Path], dict[str, Status]]


@dataclass(frozen=True)
class Case:
    name: str
    run: Runner
    must_fail: str | None  # gate that must FAIL; None: every gate must PASS
    why: str


def _phase1(fault: int) -> Runner:
    def run(config: Config, out: Path) -> dict[str, Status]:
        from harness import env
        from harness.engine import run_phase
        from harness.render import write_all

        result = run_phase(config, 1, run_id=out.name, run_dir=out, environment=env.collect(Path.cwd()),
                           repo_root=Path.cwd(), fault=fault)
        write_all(result, out)
        return {g.name: g.status for g in result.gates}

    return run


def _one_gate(gate: str, fault: int, planted: str = "") -> Runner:
    """Run a single gate of any phase with a planted kernel fault (e.g. an ncu gate, without phases 1..N-1);
    `planted` names a fault planted some other way, for the report's notice."""

    def run(config: Config, out: Path) -> dict[str, Status]:
        from harness import env
        from harness.engine import run_gate
        from harness.gates.base import GateContext
        from harness.render import write_all
        from harness.results import RunResult
        from harness.support.gpu import cuda_unavailable_reason

        spec = next(g for phase in config.phases for g in phase.gates if g.name == gate)
        (out / "logs").mkdir(parents=True, exist_ok=True)
        ctx = GateContext(spec=spec, config=config, run_dir=out, repo_root=Path.cwd(), seed=0, fault=fault)
        result = run_gate(spec, ctx, cuda_unavailable_reason())
        write_all(RunResult(out.name, spec.phase, (result,), env.collect(Path.cwd()), "", 0.0,
                            notice=f"PLANTED {planted or f'FAULT {fault}'} (test-only): {gate} must fail"), out)
        return {gate: result.status}

    return run


def _gate_while(gate: str, planted: str, fault: Callable[[], AbstractContextManager[object]]) -> Runner:
    """One gate run inside `fault()`, a test-only change to flashcore in this process (harness/planted_checks.py)."""
    run_gate = _one_gate(gate, 0, planted=planted)

    def run(config: Config, out: Path) -> dict[str, Status]:
        with fault():
            return run_gate(config, out)

    return run


def _api_without(check: str) -> Runner:
    """The api gate with flashcore.validate.<check> made a no-op."""
    from harness.planted_checks import check_disabled

    return _gate_while("api", f"no-op flashcore.validate.{check}", lambda: check_disabled(check))


def _flag_dropped(gate: str, flag: str) -> Runner:
    """`gate` with flashcore.attention ignoring `flag` (e.g. deterministic=True: the split count then follows
    sm_margin, and the results' last bits with it)."""
    from harness.planted_checks import flag_dropped

    return _gate_while(gate, f"attention() ignoring {flag}=True", lambda: flag_dropped(flag))


def _planted_spill(config: Config, out: Path) -> dict[str, Status]:
    """Build with -DFLASHCORE_PLANT_SPILL into its own directory and judge it with the build gate's verdicts."""
    from harness.gates.build import verdict_kernels
    from harness.results import combine
    from harness.support.ptxas import parse_ptxas

    build_dir = out / "build"
    out.mkdir(parents=True, exist_ok=True)
    cmd = ["make", "-s", "-f", "kernel/kernel.mk", f"BUILD_DIR={build_dir}", f"{build_dir}/libflashcore.so",
           "NVCC_EXTRA=-DFLASHCORE_PLANT_SPILL"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    (out / "build.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        return {"build": Status.ERROR}
    params = next(g.params for g in config.gates_through(1) if g.name == "build")
    checks = verdict_kernels(parse_ptxas((build_dir / "ptxas.log").read_text()), params)
    return {"build": combine([c.status for c in checks])}


def _planted_sanitizer(tool: str, mode: str) -> Runner:
    """compute-sanitizer `tool` on build/planted MODE (tests/planted/planted.cu) with the gate's phase-1 settings."""

    def run(config: Config, out: Path) -> dict[str, Status]:
        from harness.env import find_cuda_tool
        from harness.sanitizer import runner

        params = next(g.params for g in config.gates_through(1) if g.name == "sanitizer")
        sanitizer, planted = find_cuda_tool("compute-sanitizer"), Path.cwd() / "build" / "planted"
        if sanitizer is None or not planted.is_file():
            why = "compute-sanitizer not found" if sanitizer is None else f"{planted} missing (make planted)"
            print(f"  sanitizer: cannot run: {why}", file=sys.stderr)
            return {"sanitizer": Status.ERROR}
        opts = runner.Options(timeout_s=params.timeout_s(tool), padding=params.padding,
                              hopper=runner.probe(sanitizer)[1], fail_on_warnings=params.fail_on_warnings)
        o = runner.check(sanitizer, tool, [str(planted), mode], out / f"{tool}-{mode}.log", opts,
                         completion=f"planted {mode}: done")
        print(f"  sanitizer: {o.judgement.status.value} in {o.wall_s:.1f} s: {o.judgement.reason}", file=sys.stderr)
        return {"sanitizer": o.judgement.status}

    return run


def _perf(plant: str) -> Runner:
    """perf-fa2 on prefill-d128 and decode (FlashCore, FA2 and the regression references of gates/bench.yaml
    only, for time): first a clean run whose measurements become this case's stored run, then the `plant` run
    judged against it. Spread = the rel_std checks of the paired ratios.
    plant: "clean" (spread and regression must pass), "slow" (kernel fault 4, the producer waits after every
    K/V tile: the regression check must fail), "noisy" (side-stream matmul bursts alongside FlashCore's calls in
    the later half of the rounds, which pairing cannot cancel: the spread must fail and no speed verdict be drawn)."""

    def run(config: Config, out: Path) -> dict[str, Status]:
        import dataclasses

        from harness import env
        from harness.bench.backends import SLOW_FAULT
        from harness.gates import perf
        from harness.gates.base import GateContext
        from harness.render import write_all
        from harness.results import GateResult, RunResult, combine

        spec = next(g for phase in config.phases for g in phase.gates if g.name == "perf-fa2")
        params = dataclasses.replace(spec.params, workloads=("prefill-d128", "decode"), sweep=False,
                                     baselines=("fa2",), gated=("fa2",))
        spec = dataclasses.replace(spec, params=params)

        def gate(run_dir: Path, fault: int = 0, noisy: bool = False, stored: Path | None = None) -> GateResult:
            (run_dir / "logs").mkdir(parents=True, exist_ok=True)
            ctx = GateContext(spec=spec, config=config, run_dir=run_dir, repo_root=Path.cwd(), seed=0, fault=fault)
            result = perf.run_perf(ctx, noisy=noisy, stored_path=stored)
            notice = "" if plant == "clean" else f"PLANTED ({plant}, test-only): perf-fa2 must fail"
            write_all(RunResult(run_dir.name, spec.phase, (result,), env.collect(Path.cwd()), "", 0.0,
                                notice=notice), run_dir)
            return result

        first = gate(out / "stored")
        stored = out / "stored" / str(first.details.get("measurements_file", "missing.json"))
        result = gate(out / plant, fault=SLOW_FAULT if plant == "slow" else 0, noisy=plant == "noisy",
                      stored=stored)
        spread = combine([c.status for c in result.checks if c.metric.startswith("rel_std")])
        regression = combine([c.status for c in result.checks if c.metric == "slowdown_vs_stored"])
        print(f"  perf-fa2 ({plant}): spread {spread.value}, regression {regression.value}: {result.message}",
              file=sys.stderr)
        if plant != "noisy":
            return {"perf-fa2/spread": spread, "perf-fa2/regression": regression} if plant == "clean" \
                else {"perf-fa2/regression": regression}
        noisy = {c.workload for c in result.checks if c.metric.startswith("rel_std") and c.status is Status.FAIL}
        judged = [c for c in result.checks if c.workload in noisy and not c.metric.startswith("rel_std")
                  and c.status in (Status.PASS, Status.FAIL)]
        return {"perf-fa2/spread": Status.ERROR if judged else spread}  # a verdict drawn from noise is a bug

    return run


PLANTS = ("phase1", "gate", "spill", "validate-off", "flag-dropped", "perf", "sanitizer")  # SelfTest.plant kinds


def runner_for(gate: str, t: SelfTest) -> Runner:
    """The runner of a gate's declared planted fault (harness/gates/base.py SelfTest)."""
    if t.plant == "phase1":
        return _phase1(Fault[t.arg])
    if t.plant == "gate":
        return _one_gate(gate, Fault[t.arg])
    if t.plant == "spill":
        return _planted_spill
    if t.plant == "validate-off":
        return _api_without(t.arg)
    if t.plant == "flag-dropped":
        return _flag_dropped(gate, t.arg)
    if t.plant == "perf":
        return _perf(t.arg)
    if t.plant == "sanitizer":
        tool, _, mode = t.arg.partition(":")
        return _planted_sanitizer(tool, mode)
    raise ValueError(f"gate {gate}: selftest {t.name}: unknown plant {t.plant!r} (known: {', '.join(PLANTS)})")


def declared_cases() -> tuple[Case, ...]:
    """The clean phase-1 run, then each registered gate's declared planted faults (`Gate.selftests`)."""
    from harness.gates import registry

    cases = [Case("clean", _phase1(Fault.NONE), None, "the real kernel passes every phase-1 gate")]
    for name in registry.names():
        gate = registry.get(name)
        for t in gate.selftests if gate is not None else ():
            must_fail = None if t.must_fail == "-" else (t.must_fail or name)
            cases.append(Case(t.name, runner_for(name, t), must_fail, t.why))
    return tuple(cases)


CASES = declared_cases()


def judge(case: Case, statuses: dict[str, Status]) -> tuple[bool, str]:
    """Did the case behave as planted? (the named gate FAILs; with nothing planted, all PASS)."""
    if case.must_fail is None:
        bad = {n: s.value for n, s in statuses.items() if s is not Status.PASS}
        return not bad, "all gates pass" if not bad else f"not passing: {bad}"
    got = statuses.get(case.must_fail)
    if got is Status.FAIL:
        return True, f"{case.must_fail} failed as planted"
    return False, f"{case.must_fail} was {got.value if got else 'missing'}, expected fail"


def select(names: str | None) -> list[Case]:
    """The cases named in a comma-separated list (all when None); an unknown name is an error."""
    if not names:
        return list(CASES)
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    known = {c.name: c for c in CASES}
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise SystemExit(f"selftest: unknown case(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return [known[n] for n in wanted]


def main(gates_dir: Path = Path("gates"), cases: str | None = None) -> int:
    chosen = select(cases)
    from harness.support import gpu

    if why := gpu.cuda_unavailable_reason():  # every case plants a fault in a GPU run: without one, none can judge
        print(f"selftest: needs an SM 9.0 GPU, none here ({why}); nothing was run", file=sys.stderr)
        return 1
    config = load_config(gates_dir)
    root = Path("reports") / f"selftest-{dt.datetime.now(dt.UTC).strftime('%Y%m%dT%H%M%SZ')}"
    rows = []
    for case in chosen:
        print(f"selftest: {case.name}: {case.why}", file=sys.stderr, flush=True)
        ok, what = judge(case, case.run(config, root / case.name))
        rows.append((case.name, "OK" if ok else "WRONG", what))
    width = max(len(r[0]) for r in rows)
    print(f"\nselftest ({root})")
    for name, verdict, what in rows:
        print(f"  {name:<{width}}  {verdict:<5}  {what}")
    failed = [r for r in rows if r[1] != "OK"]
    print(f"{len(rows) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0
