"""How `make selftest` plants each kind of fault, and runs the same thing clean as the fault's control.

A runner is `run(config, out, planted) -> {gate or gate/part: status}`: with `planted` the fault is in, without it
the same gate runs on the same inputs with nothing planted (the control). Kernel faults and flashcore changes go
through the engine (harness/engine.py), so the gate runs in its watched worker exactly as in `make gate-phaseN`;
sanitizer cases go through the gate's own runner with the project's reviewed suppressions; the timed gates run in
this process (harness/selftest_perf.py). A run that several cases share (a sanitizer tool's clean mode, a timed
gate's stored and clean runs) is made once per self-test (`once`).
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.results import GateResult, RunResult, Status
from harness.schema import Config, ConfigError, GateSpec

Runner = Callable[[Config, Path, bool], dict[str, Status]]
WATCHDOG_KEY = "watchdog"  # gate/watchdog: FAIL when the watchdog ended the gate as planted, PASS when it finished

_memo: dict[tuple[Any, ...], Any] = {}
_memo_lock = threading.Lock()
_key_locks: dict[tuple[Any, ...], threading.Lock] = {}


def once(key: tuple[Any, ...], make: Callable[[], Any]) -> Any:
    """make() the first time `key` is asked for, its value afterwards (cases running in parallel wait for it)."""
    with _memo_lock:
        lock = _key_locks.setdefault(key, threading.Lock())
    with lock:
        if key not in _memo:
            _memo[key] = make()
        return _memo[key]


def spec_of(config: Config, gate: str) -> GateSpec:
    return next(g for phase in config.phases for g in phase.gates if g.name == gate)


def trimmed(config: Config, gates: dict[str, tuple[str, ...]]) -> Config:
    """`config` with each named gate's `workloads` param replaced (a case runs its gate on the workloads it needs)."""

    def spec(s: GateSpec) -> GateSpec:
        names = gates.get(s.name)
        return dataclasses.replace(s, params=dataclasses.replace(s.params, workloads=names)) if names else s

    return dataclasses.replace(config, phases=tuple(dataclasses.replace(p, gates=tuple(map(spec, p.gates)))
                                                    for p in config.phases))


def engine_run(config: Config, out: Path, gates: tuple[str, ...], fault: int = 0, plant: str = "",
               workloads: tuple[str, ...] = (), limit_s: float | None = None) -> RunResult:
    """`gates` run by the engine in their watched worker (trimmed to `workloads` with the limit `limit_s`, when
    given), with the kernel fault and the worker-side plant; the run's report is written to `out`."""
    from harness import env
    from harness.engine import run_phase
    from harness.render import write_all
    from harness.watchdog import load_watchdog

    cfg = trimmed(config, dict.fromkeys(gates, workloads)) if workloads else config
    limits = load_watchdog(config.gates_dir)
    if limit_s is not None:
        limits = dataclasses.replace(limits, fixed_s=dict.fromkeys(gates, limit_s))
    phase = max(spec_of(config, g).phase for g in gates)
    result = run_phase(cfg, phase, run_id=out.name, run_dir=out, environment=env.collect(Path.cwd()),
                       repo_root=Path.cwd(), seed=0, fault=fault, plant=plant, only=set(gates), limits=limits,
                       live=False)
    write_all(result, out)
    return result


def engine_gates(gates: tuple[str, ...], fault: int = 0, plant: str = "", workloads: tuple[str, ...] = (),
                 limit_s: float | None = None) -> Runner:
    """engine_run with the fault and plant when planted, without them for the control; each gate's status."""

    def run(config: Config, out: Path, planted: bool) -> dict[str, Status]:
        result = engine_run(config, out, gates, fault if planted else 0, plant if planted else "", workloads,
                            limit_s)
        return {g.name: g.status for g in result.gates}

    return run


def hang_caught(gate: str, then: str, workloads: tuple[str, ...], limit_s: float) -> Runner:
    """The planted hang: `gate`, then `then`, with every kernel call hanging. Caught (gate/watchdog FAIL) only when
    the watchdog ended `gate` with an ERROR naming its workload and the fault, `then` still ran (and was ended the
    same way: a fresh worker), and the report was written. The control runs both gates clean: both must PASS."""
    from flashcore.faults import Fault

    def ended(r: GateResult | None) -> bool:
        return r is not None and "planted fault: hang" in r.message and any(
            c.metric == "time_limit_s" and any(w in c.workload for w in workloads) for c in r.checks)

    def run(config: Config, out: Path, planted: bool) -> dict[str, Status]:
        result = engine_run(config, out, (gate, then), int(Fault.HANG) if planted else 0, "", workloads, limit_s)
        gates = {g.name: g for g in result.gates}
        statuses = {g.name: g.status for g in result.gates}
        if not planted:
            return {**statuses, f"{gate}/{WATCHDOG_KEY}": combine_pass(statuses[gate], statuses[then])}
        caught = ended(gates.get(gate)) and ended(gates.get(then)) and (out / "index.html").is_file()
        print(f"  hang: {gate}: {gates[gate].message if gate in gates else 'missing'}", file=sys.stderr)
        return {**statuses, f"{gate}/{WATCHDOG_KEY}": Status.FAIL if caught else Status.ERROR}

    return run


def combine_pass(*statuses: Status) -> Status:
    from harness.results import combine

    return combine(list(statuses))


def planted_spill(config: Config, out: Path, planted: bool) -> dict[str, Status]:
    """Planted: a build with -DFLASHCORE_PLANT_SPILL into its own directory; control: the library `make build`
    made (build/ptxas.log). Both judged by the build gate's verdicts."""
    from harness.gates.build import verdict_kernels
    from harness.results import combine
    from harness.support.ptxas import parse_ptxas

    log = Path.cwd() / "build" / "ptxas.log"
    if planted:
        build_dir = out / "build"
        out.mkdir(parents=True, exist_ok=True)
        cmd = ["make", "-s", f"-j{os.cpu_count() or 4}", "-f", "kernel/kernel.mk", f"BUILD_DIR={build_dir}",
               f"{build_dir}/libflashcore.so", "NVCC_EXTRA=-DFLASHCORE_PLANT_SPILL"]  # -j: within the call's minutes
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        (out / "build.log").write_text(proc.stdout + proc.stderr)
        if proc.returncode != 0:
            return {"build": Status.ERROR}
        log = build_dir / "ptxas.log"
    if not log.is_file():
        return {"build": Status.ERROR}
    params = spec_of(config, "build").params
    return {"build": combine([c.status for c in verdict_kernels(parse_ptxas(log.read_text()), params)])}


def planted_sanitizer(tool: str, mode: str) -> Runner:
    """compute-sanitizer `tool` on build/planted MODE (tests/planted/planted.cu; control: its clean mode) with the
    sanitizer gate's phase-1 settings and the project's reviewed suppressions: a blanket suppression that hides the
    planted bug turns this case's fault green, so the self-test fails."""

    def run(config: Config, out: Path, planted: bool) -> dict[str, Status]:
        which = mode if planted else "clean"
        status = once(("sanitizer", out.parent, tool, which), lambda: sanitizer_run(config, out, tool, which))
        return {"sanitizer": status}

    return run


def sanitizer_run(config: Config, out: Path, tool: str, mode: str) -> Status:
    from harness.env import find_cuda_tool
    from harness.sanitizer import runner
    from harness.sanitizer.suppressions import load_suppressions

    params = spec_of(config, "sanitizer").params
    sanitizer, planted = find_cuda_tool("compute-sanitizer"), Path.cwd() / "build" / "planted"
    if sanitizer is None or not planted.is_file():
        why = "compute-sanitizer not found" if sanitizer is None else f"{planted} missing (make planted)"
        print(f"  sanitizer: cannot run: {why}", file=sys.stderr)
        return Status.ERROR
    try:
        suppressions = load_suppressions(Path.cwd() / params.suppressions)
    except ConfigError as e:  # as the gate: a bad suppressions file gives no verdict
        print(f"  sanitizer: bad suppressions file: {e}", file=sys.stderr)
        return Status.ERROR
    opts = runner.Options(timeout_s=params.timeout_s(tool), padding=params.padding,
                          hopper=runner.probe(sanitizer)[1], fail_on_warnings=params.fail_on_warnings,
                          suppressions=suppressions)
    o = runner.check(sanitizer, tool, [str(planted), mode], out / f"{tool}-{mode}.log", opts,
                     completion=f"planted {mode}: done")
    print(f"  sanitizer {tool} {mode}: {o.judgement.status.value} in {o.wall_s:.1f} s: {o.judgement.reason}",
          file=sys.stderr)
    return o.judgement.status


def red_by_spread(statuses: dict[str, Status]) -> bool:
    """A run whose spread check failed: its ratios were judged noise, so what it says of the gate is undecided."""
    return any(k.endswith("/spread") and v is Status.FAIL for k, v in statuses.items())


def clean_run(run: Callable[[Path], dict[str, Status]], path: Path, reruns: int) -> tuple[dict[str, Status], int]:
    """A clean run (a control, or a clean case), measured again up to `reruns` times while its spread check alone
    turns it red: on the H200, clean perf controls read 2.3-2.4 % spreads (limit 2 %) beside the other GPU's share,
    and a control red by noise proves nothing about its gate. A fault run is never re-run (planted noise must stay
    red), and the gate's own verdicts are untouched. Returns the last run's statuses and how many re-runs it took."""
    statuses = run(path)
    n = 0
    while n < reruns and red_by_spread(statuses):
        n += 1
        statuses = run(path.with_name(f"{path.name}-rerun{n}"))
    return statuses, n
