"""`python -m harness selftest` (make selftest, GPU host): prove that each gate can fail, and that it can pass.

Each case plants one fault in one gate and runs that gate twice: with the fault, when it must turn red (FAIL; for
the planted hang, the watchdog's ERROR), and as a clean control (the same gate, workloads and code path, nothing
planted), when it must PASS. A case holds only when both do, so a gate that is always red fails its self-test.
Cases are declared on the gate classes (`selftests`, harness/gates/base.py SelfTest) and in gates/selftest.yaml
(`cases`), which also trims each case to the workloads its fault needs, sets how many cases run at once on the one
GPU, names the profiled gates whose cases run alone (the timed ones always do: harness/selftest_perf.py), and names
the shares: `--share I/N` runs the I-th of its N shares, which together hold each case once and each fit one device
call by the cases' expected seconds (`estimates_s`, from the last GPU runs). Exit 0 only when every case held.
Reports: reports/selftest-<time>/<case>/ (the fault) and <case>-control/ (the control; cases with the same control
share one run; a timed gate's clean and stored runs: <gate>-clean/, <gate>-stored/).
"""

from __future__ import annotations

import datetime as dt
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from flashcore.faults import Fault
from harness import selftest_runs as runs
from harness.config import load_config
from harness.gates.base import SelfTest
from harness.results import Status
from harness.schema import Config, ConfigError
from harness.selftest_perf import check_bench, perf_case
from harness.selftest_runs import WATCHDOG_KEY, Runner, clean_run, once
from harness.selftest_settings import SELFTEST_FILE, SelftestSettings, load_selftest_settings

PLANTS = ("phase1", "gate", "hang", "spill", "validate-off", "flag-dropped", "perf", "sanitizer", "cpu")


@dataclass(frozen=True)
class Case:
    name: str
    gate: str
    run: Runner
    must_fail: str | None  # the gate (or gate/part) that must be red; None: a clean case, every status must PASS
    why: str
    control: str = ""  # cases with the same key share one control run ("": the case's own)
    serial: bool = False  # runs alone, after the parallel cases (timed or profiled gates)


def runner_for(gate: str, t: SelfTest, settings: SelftestSettings) -> tuple[Runner, str]:
    """The runner of a declared planted fault, and its control's key."""
    trim = settings.trim.get(t.name, ())
    limit = settings.limit_s if trim else None
    shared = f"{gate}:{','.join(trim)}"  # the same gate on the same workloads, nothing planted
    if t.plant in ("phase1", "gate"):
        return runs.engine_gates((gate,), fault=int(Fault[t.arg]), workloads=trim, limit_s=limit), shared
    if t.plant in ("validate-off", "flag-dropped"):
        return runs.engine_gates((gate,), plant=f"{t.plant}:{t.arg}", workloads=trim, limit_s=limit), shared
    if t.plant == "hang":
        return runs.hang_caught(gate, t.arg, trim, settings.limit_s), ""
    if t.plant == "spill":
        return runs.planted_spill, ""
    if t.plant == "perf":
        return perf_case(gate, t.arg, trim, settings.bench, settings.spread_reruns), f"timed:{shared}"
    if t.plant == "sanitizer":
        tool, _, mode = t.arg.partition(":")
        return runs.planted_sanitizer(tool, mode), ""
    if t.plant == "cpu":
        from harness.planted_cpu import RUNNERS

        if t.arg not in RUNNERS:
            raise ValueError(f"gate {gate}: selftest {t.name}: no CPU plant {t.arg!r} (known: {', '.join(RUNNERS)})")
        return RUNNERS[t.arg], ""
    raise ValueError(f"gate {gate}: selftest {t.name}: unknown plant {t.plant!r} (known: {', '.join(PLANTS)})")


def declared_cases(settings: SelftestSettings) -> tuple[Case, ...]:
    """Each registered gate's declared planted faults (`Gate.selftests`), then gates/selftest.yaml's cases."""
    from harness.gates import registry

    declared = [(name, t) for name in registry.names() for t in getattr(registry.get(name), "selftests", ())]
    cases = []
    for gate, t in [*declared, *settings.cases]:
        run, control = runner_for(gate, t, settings)
        must_fail = None if t.must_fail == "-" else (
            t.must_fail or (f"{gate}/{WATCHDOG_KEY}" if t.plant == "hang" else gate))
        # a timed case runs alone: it times the GPU, in this process (where its plant is made)
        cases.append(Case(t.name, gate, run, must_fail, t.why, control, gate in settings.serial or t.plant == "perf"))
    return tuple(cases)


# The repository's cases (its gates/ beside this package), for the tests that look one up by name.
CASES = declared_cases(load_selftest_settings(Path(__file__).resolve().parent.parent / "gates"))


def check_settings(settings: SelftestSettings, cases: tuple[Case, ...], config: Config) -> None:
    """Every name in gates/selftest.yaml means something: a ConfigError naming the key otherwise."""
    from harness.gates import registry

    file = config.gates_dir / SELFTEST_FILE
    names = [c.name for c in cases]
    if len(set(names)) != len(names):
        raise ConfigError(file, "cases", names, "two cases share a name")
    for case, workloads in settings.trim.items():
        if case not in names:
            raise ConfigError(file, f"trim.{case}", list(workloads), "no declared case has this name")
        if unknown := [w for w in workloads if w not in config.workloads]:
            raise ConfigError(file, f"trim.{case}", unknown, "not workloads of workloads.yaml")
    for i, (gate, _) in enumerate(settings.cases):
        if registry.get(gate) is None:
            raise ConfigError(file, f"cases[{i}].gate", gate, "not a registered gate")
    if unknown := [g for g in settings.serial if registry.get(g) is None]:
        raise ConfigError(file, "serial", unknown, "not registered gates")
    if unknown := [n for n in settings.estimates_s if n not in names]:
        raise ConfigError(file, "estimates_s", unknown, "no declared case has this name")
    if missing := [n for n in names if n not in settings.estimates_s]:
        raise ConfigError(file, "estimates_s", missing, "cases without their expected seconds")
    check_shares(settings, cases, file)
    check_bench(config, settings.bench)


def check_shares(settings: SelftestSettings, cases: tuple[Case, ...], file: Path) -> None:
    """The shares hold every case exactly once, and each is expected to fit share_limit_s."""
    held = [n for share in settings.shares for n in share]
    if unknown := [n for n in held if n not in {c.name for c in cases}]:
        raise ConfigError(file, "shares", unknown, "no declared case has this name")
    if twice := sorted({n for n in held if held.count(n) > 1}):
        raise ConfigError(file, "shares", twice, "cases in more than one share (or twice in one)")
    if left := [c.name for c in cases if c.name not in held]:
        raise ConfigError(file, "shares", left, "cases in no share: no `--share` would run them")
    by_name = {c.name: c for c in cases}
    for i, share in enumerate(settings.shares):
        expected = expected_s([by_name[n] for n in share], settings)
        if expected > settings.share_limit_s:
            raise ConfigError(file, f"shares[{i}]", list(share), f"expected {expected:.0f} s, over share_limit_s "
                                                                  f"({settings.share_limit_s:.0f} s)")


def expected_s(cases: list[Case], settings: SelftestSettings) -> float:
    """A share's expected wall time: its parallel cases `parallel` at a time (no less than the longest), then its
    serial ones one after another."""
    together = [settings.estimates_s[c.name] for c in cases if not c.serial]
    alone = sum(settings.estimates_s[c.name] for c in cases if c.serial)
    return max(max(together, default=0.0), sum(together) / settings.parallel) + alone


def judge(case: Case, fault: dict[str, Status], control: dict[str, Status] | None) -> tuple[bool, str]:
    """Red with the fault AND green without it (a clean case: everything green)."""
    if case.must_fail is None:
        bad = {n: s.value for n, s in fault.items() if s is not Status.PASS}
        return (not bad and bool(fault)), "all pass" if fault and not bad else f"not passing: {bad or 'nothing ran'}"
    red, green = fault.get(case.must_fail), (control or {}).get(case.must_fail)
    ok = red is Status.FAIL and green is Status.PASS
    text = (f"{case.must_fail}: fault {red.value if red else 'missing'} "
            f"({'red' if red is Status.FAIL else 'expected fail'}), control {green.value if green else 'missing'} "
            f"({'green' if green is Status.PASS else 'expected pass'})")
    return ok, text


@dataclass(frozen=True)
class Row:
    case: Case
    ok: bool
    text: str
    fault_s: float
    control_s: float


def run_case(case: Case, config: Config, root: Path, reruns: int = 0) -> Row:
    """The fault run and its control; a runner that raises makes the case WRONG, with the traceback printed."""
    t0 = time.monotonic()
    again = 0
    try:
        if case.must_fail is None:
            fault, again = clean_run(lambda p: case.run(config, p, True), root / case.name, reruns)
        else:
            fault = case.run(config, root / case.name, True)
        t1 = time.monotonic()
        control = None
        if case.must_fail is not None:
            key = ("control", root, case.control or case.name)
            control, again = once(key, lambda: clean_run(lambda p: case.run(config, p, False),
                                                         root / f"{case.name}-control", reruns))
    except Exception as e:  # noqa: BLE001 - one broken case must not hide the others' verdicts
        traceback.print_exc()
        return Row(case, False, f"the case crashed: {type(e).__name__}: {e}", time.monotonic() - t0, 0.0)
    ok, text = judge(case, fault, control)
    if again:
        text += f" (clean run measured {again + 1} times: red by its spread alone before)"
    return Row(case, ok, text, t1 - t0, time.monotonic() - t1)


def run_all(cases: list[Case], config: Config, root: Path, parallel: int, reruns: int = 0) -> list[Row]:
    """The parallel cases `parallel` at a time, then the serial ones alone; rows in the cases' order."""

    def one(case: Case) -> Row:
        print(f"selftest: {case.name} ({case.gate}): {case.why}", file=sys.stderr, flush=True)
        return run_case(case, config, root, reruns)

    with ThreadPoolExecutor(max_workers=parallel) as pool:
        rows = {r.case.name: r for r in pool.map(one, [c for c in cases if not c.serial])}
    rows |= {c.name: one(c) for c in cases if c.serial}
    return [rows[c.name] for c in cases]


def share_of(cases: list[Case], share: str | None, shares: tuple[tuple[str, ...], ...]) -> list[Case]:
    """`I/N` (1-based, N = the number of shares gates/selftest.yaml names): the cases of its I-th share, in the
    cases' order; None: all."""
    if not share:
        return cases
    from harness.shard_runners import parse_shard  # the CI runners' I/N, the same rule

    try:
        i, n = parse_shard(share)
    except ValueError as e:
        raise SystemExit(f"selftest: --share: {e}") from None
    if n != len(shares):
        raise SystemExit(f"selftest: --share {share}: gates/selftest.yaml names {len(shares)} shares "
                         f"(--share I/{len(shares)})")
    return [c for c in cases if c.name in shares[i - 1]]


def select(all_cases: tuple[Case, ...], names: str | None) -> list[Case]:
    """The cases named in a comma-separated list (all when None); an unknown name is an error."""
    if not names:
        return list(all_cases)
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    known = {c.name: c for c in all_cases}
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise SystemExit(f"selftest: unknown case(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return [known[n] for n in wanted]


def table(rows: list[Row]) -> list[str]:
    """One line per case, grouped by gate: the verdict, what the fault and the control gave, the wall times."""
    width = max(len(r.case.gate) for r in rows), max(len(r.case.name) for r in rows)
    lines = []
    for r in sorted(rows, key=lambda r: r.case.gate):
        wall = f"{r.fault_s:.1f} s" + (f" + control {r.control_s:.1f} s" if r.case.must_fail else "")
        lines.append(f"  {r.case.gate:<{width[0]}}  {r.case.name:<{width[1]}}  {'OK' if r.ok else 'WRONG':<5}  "
                     f"{r.text}  [{wall}]")
    return lines


def plan(chosen: list[Case], share: str | None, settings: SelftestSettings) -> str:
    """What this run will do, printed before it starts: its share, its cases and gates, the expected time."""
    serial = [c.name for c in chosen if c.serial]
    return (f"selftest{f' share {share}' if share else ''}: {len(chosen)} cases of "
            f"{len({c.gate for c in chosen})} gates, expected ~{expected_s(chosen, settings):.0f} s "
            f"({settings.parallel} at a time: {', '.join(c.name for c in chosen if not c.serial) or 'none'}; "
            f"then alone: {', '.join(serial) or 'none'})")


def main(gates_dir: Path = Path("gates"), cases: str | None = None, share: str | None = None) -> int:
    settings = load_selftest_settings(gates_dir)
    config = load_config(gates_dir)
    every = declared_cases(settings)
    check_settings(settings, every, config)
    chosen = share_of(select(every, cases), share, settings.shares)
    print(plan(chosen, share, settings), file=sys.stderr, flush=True)
    from harness.support import gpu

    if why := gpu.cuda_unavailable_reason():  # every case plants a fault in a GPU run: without one, none can judge
        print(f"selftest: needs an SM 9.0 GPU, none here ({why}); nothing was run", file=sys.stderr)
        return 1
    root = Path("reports") / f"selftest-{dt.datetime.now(dt.UTC).strftime('%Y%m%dT%H%M%SZ')}"
    t0 = time.monotonic()
    # the longest first, so no long case starts last and the share ends near its expected time
    rows = run_all(sorted(chosen, key=lambda c: -settings.estimates_s[c.name]), config, root, settings.parallel,
                   settings.spread_reruns)
    failed = [r for r in rows if not r.ok]
    wall = time.monotonic() - t0
    print(f"\nselftest ({root}){f', share {share}' if share else ''}: {len(rows)} cases in {wall:.0f} s "
          f"({settings.parallel} at a time)")
    print("\n".join(table(rows)))
    print(f"{f'share {share}: ' if share else ''}{len(rows) - len(failed)} passed, {len(failed)} failed, "
          f"{len({r.case.gate for r in rows})} gates, {wall:.0f} s (expected ~{expected_s(chosen, settings):.0f} s)"
          + (f"; failed: {', '.join(r.case.name for r in failed)}" if failed else ""))
    return 1 if failed else 0
