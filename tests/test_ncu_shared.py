"""One ncu profile for the ncu gates of a run that ask for the same workload with the same settings
(harness/ncu/shared.py): counted on the stand-in ncu, with each gate's verdict compared with the one it gives alone."""

from __future__ import annotations

import csv
import io
import os
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType

import pytest
from conftest import REPO, make_context
from test_ncu_gates import DECODE, DRAM, FIXTURES, PREFILL, SM, calls, dram_params, fake_ncu
from test_ncu_stalls import params as stall_params
from test_ncu_stalls import stalls_csv

from harness.config import load_config
from harness.engine import run_phase
from harness.gates import ncu as ncu_gate
from harness.gates import registry
from harness.gates.base import Gate, GateContext
from harness.gates.ncu_stalls import NcuStallsGate
from harness.ncu import shared
from harness.results import Check, GateResult, RunResult, Status
from harness.run_files import compress_logs
from harness.schema import Config, GateSpec, PhaseSpec
from harness.watchdog import WatchdogSettings

GATES: dict[str, type[Gate]] = {"ncu-dram": ncu_gate.NcuDramGate, "ncu-sm": ncu_gate.NcuSmGate,
                                "ncu-sm-pipeline": ncu_gate.NcuSmPipelineGate, "ncu-stalls": NcuStallsGate}


def sm_params(ncu: Path, **changes: object) -> ncu_gate.NcuThroughputParams:
    return dram_params(ncu, **{"workloads": ("prefill-d128",), "metric": SM, "min_pct": 70.0,
                               "applies_to": "compute-bound", **changes})


def run_together(run_dir: Path, gates: list[tuple[str, object]], fault: int = 0) -> dict[str, GateResult]:
    """The gates in order in one run directory, each knowing the others (as the engine runs them)."""
    peers = tuple(GateSpec(name, 1, p) for name, p in gates)
    results = {}
    for spec in peers:
        ctx = context(run_dir, spec.name, spec.params, fault)
        ctx.peers = peers
        results[spec.name] = GATES[spec.name]().run(ctx)
    return results


def context(run_dir: Path, name: str, p: object, fault: int = 0) -> GateContext:
    ctx = make_context(run_dir, name, p, (DECODE, PREFILL), repo_root=run_dir.parent)
    ctx.fault = fault
    return ctx


def alone(run_dir: Path, name: str, p: object) -> GateResult:
    return GATES[name]().run(context(run_dir, name, p))


def profiles(tmp_path: Path) -> list[list[str]]:
    return [c for c in calls(tmp_path) if "--export" in c]


def verdict(result: GateResult) -> tuple[object, ...]:
    return result.status, [(c.workload, c.metric, c.status, c.measured, c.threshold, c.message) for c in result.checks]


def with_dram(tmp_path: Path, value: str) -> Path:
    """The decode capture with the DRAM throughput of every launch set to `value`."""
    lines = (FIXTURES / "ours-decode.csv").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID",'))
    header = next(csv.reader([lines[start]]))
    column = header.index(DRAM)
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n")
    for line in lines[start + 1:]:
        row = next(csv.reader([line]))
        if row and row[0].strip().isdigit():
            row[column] = value
        writer.writerow(row)
    path = tmp_path / f"decode-dram-{value}.csv"
    path.write_text("\n".join(lines[: start + 1]) + "\n" + out.getvalue())
    return path


# ---- one profile, the verdicts each gate gives alone ----------------------------------------------


def test_two_gates_on_one_workload_profile_it_once_with_the_verdicts_they_give_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ncu = fake_ncu(tmp_path, monkeypatch, {8192: FIXTURES / "ours-prefill.csv"})
    sm, pipeline = sm_params(ncu), sm_params(ncu, min_pct=40.0)
    together = run_together(tmp_path / "run", [("ncu-sm", sm), ("ncu-sm-pipeline", pipeline)])
    assert len(profiles(tmp_path)) == 1
    (tmp_path / "ncu-args.jsonl").unlink()
    by_itself = {"ncu-sm": alone(tmp_path / "sm", "ncu-sm", sm),
                 "ncu-sm-pipeline": alone(tmp_path / "pipeline", "ncu-sm-pipeline", pipeline)}
    assert len(profiles(tmp_path)) == 2
    for name, result in together.items():
        assert verdict(result) == verdict(by_itself[name]), name
    assert together["ncu-sm"].status is Status.FAIL and together["ncu-sm-pipeline"].status is Status.PASS


def test_the_report_is_stored_once_and_both_gates_name_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ncu = fake_ncu(tmp_path, monkeypatch, {8192: FIXTURES / "ours-prefill.csv"})
    run_dir = tmp_path / "run"
    together = run_together(run_dir, [("ncu-sm", sm_params(ncu)), ("ncu-sm-pipeline", sm_params(ncu))])
    assert sorted(p.relative_to(run_dir).as_posix() for p in run_dir.rglob("*.ncu-rep")) == [
        "logs/ncu-sm/prefill-d128.ncu-rep"]
    for name, result in together.items():
        assert "logs/ncu-sm/prefill-d128.ncu-rep" in result.logs, name
        entry = result.details["workloads"]["prefill-d128"]
        assert entry["profiled_by"] == "ncu-sm" and entry["shared_by"] == ["ncu-sm", "ncu-sm-pipeline"]
    log = (run_dir / "logs/ncu-sm-pipeline.log").read_text()
    assert "judged from logs/ncu-sm/prefill-d128.ncu-rep (profiled by ncu-sm, one profile for ncu-sm, " \
           "ncu-sm-pipeline)" in log
    # compressed once at the end of the run, and both gates then name the compressed file
    (run_dir / "logs/ncu-sm/prefill-d128.ncu-rep").write_bytes(b"x" * 100_000)
    packed = compress_logs(RunResult("r", 4, tuple(together.values()), {}, "2026-01-01T00:00:00Z", 1.0), run_dir)
    for gate in packed.gates:
        assert "logs/ncu-sm/prefill-d128.ncu-rep.xz" in gate.logs, gate.name
    assert not (run_dir / "logs/ncu-sm/prefill-d128.ncu-rep").exists()


def test_the_profile_collects_the_union_of_the_metrics_in_one_run(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    ncu = fake_ncu(tmp_path, monkeypatch, {8192: FIXTURES / "ours-prefill.csv"})
    extra = "sm__warps_active.avg.pct_of_peak_sustained_active"
    run_together(tmp_path / "run", [("ncu-sm", sm_params(ncu, metrics=(SM,))),
                                    ("ncu-sm-pipeline", sm_params(ncu, metrics=(SM, extra)))])
    (profile,) = profiles(tmp_path)
    assert profile[profile.index("--metrics") + 1] == f"{SM},{extra}"


def test_different_settings_are_profiled_apart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ncu = fake_ncu(tmp_path, monkeypatch, {8192: FIXTURES / "ours-prefill.csv"})
    together = run_together(tmp_path / "run", [("ncu-sm", sm_params(ncu)),
                                               ("ncu-sm-pipeline", sm_params(ncu, launch_skip=2))])
    got = profiles(tmp_path)
    assert [p[p.index("--launch-skip") + 1] for p in got] == ["1", "2"]
    assert together["ncu-sm-pipeline"].details["workloads"]["prefill-d128"]["profiled_by"] == "ncu-sm-pipeline"
    assert {"logs/ncu-sm-pipeline/prefill-d128.ncu-rep"} <= set(together["ncu-sm-pipeline"].logs)


def test_sections_and_a_planted_fault_are_settings_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ncu = fake_ncu(tmp_path, monkeypatch, {8192: stalls_csv(tmp_path)})
    run_together(tmp_path / "run", [("ncu-sm", sm_params(ncu, launch_count=1)),
                                    ("ncu-stalls", stall_params(ncu))])
    assert len(profiles(tmp_path)) == 2  # same launches, but the stall gate adds sections
    first = context(tmp_path / "x", "ncu-sm", sm_params(ncu))
    assert shared.settings_key(first, PREFILL, sm_params(ncu)) != shared.settings_key(
        context(tmp_path / "x", "ncu-sm", sm_params(ncu), fault=4), PREFILL, sm_params(ncu))


# ---- what sharing must not change -----------------------------------------------------------------


def test_a_metric_missing_from_the_shared_run_is_an_error_for_the_gate_that_needs_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ncu = fake_ncu(tmp_path, monkeypatch, {8192: FIXTURES / "ours-prefill.csv"})
    bogus = "sm__bogus_counter.avg.pct_of_peak_sustained_elapsed"
    together = run_together(tmp_path / "run", [("ncu-sm", sm_params(ncu)),
                                               ("ncu-sm-pipeline", sm_params(ncu, min_pct=40.0,
                                                                             metrics=(SM, bogus)))])
    assert len(profiles(tmp_path)) == 1
    assert together["ncu-sm"].status is Status.FAIL  # judged on its own metric, as alone
    pipeline = together["ncu-sm-pipeline"]
    assert pipeline.status is Status.ERROR
    assert [(c.metric, c.status) for c in pipeline.checks] == [(bogus, Status.ERROR)]
    assert "missing from the ncu output" in pipeline.checks[0].message


def test_a_peer_metric_ncu_refuses_does_not_fail_the_other_gate(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    ncu = fake_ncu(tmp_path, monkeypatch, {8192: FIXTURES / "ours-prefill.csv"})
    bogus = "sm__bogus_counter.avg.pct_of_peak_sustained_elapsed"
    monkeypatch.setenv("FAKE_NCU_UNKNOWN", bogus)
    sm = sm_params(ncu, min_pct=40.0)
    together = run_together(tmp_path / "run", [("ncu-sm-pipeline", sm_params(ncu, metrics=(SM, bogus))),
                                               ("ncu-sm", sm)])
    assert together["ncu-sm-pipeline"].status is Status.ERROR
    assert "Failed to find metric" in together["ncu-sm-pipeline"].message
    assert verdict(together["ncu-sm"]) == verdict(alone(tmp_path / "alone", "ncu-sm", sm))
    assert together["ncu-sm"].status is Status.PASS
    assert "logs/ncu-sm/prefill-d128.alone.ncu-rep" in together["ncu-sm"].logs


@pytest.mark.parametrize(("dram", "status"), [("91.74", Status.PASS), ("41.74", Status.FAIL)])
def test_a_planted_low_dram_fails_ncu_dram_when_shared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       dram: str, status: Status) -> None:
    ncu = fake_ncu(tmp_path, monkeypatch, {1: with_dram(tmp_path, dram), 8192: FIXTURES / "ours-prefill.csv"})
    together = run_together(tmp_path / "run", [
        ("ncu-dram", dram_params(ncu)), ("ncu-sm", sm_params(ncu, workloads=("decode", "prefill-d128")))])
    assert len(profiles(tmp_path)) == 2  # decode once for both gates, prefill for ncu-sm
    result = together["ncu-dram"]
    assert result.status is status, result.message
    assert result.checks[0].measured == pytest.approx(float(dram))
    shown = together["ncu-sm"].details["workloads"]["decode"]
    assert shown["profiled_by"] == "ncu-dram" and shown["kernels"][0]["metrics"][DRAM] == pytest.approx(float(dram))


def test_a_timeout_is_the_longest_of_the_sharing_gates(tmp_path: Path) -> None:
    p = dram_params(Path("ncu"))
    ctx = context(tmp_path / "run", "ncu-dram", p)
    ctx.peers = (GateSpec("ncu-dram", 2, p), GateSpec("ncu-sm", 3, replace(p, timeout_s=90, metrics=(SM,))))
    assert shared.plan(ctx, DECODE, p) == ((DRAM, SM), 90, ("ncu-dram", "ncu-sm"))


# ---- the gates as configured ----------------------------------------------------------------------


def test_phases_yaml_profiles_each_workload_once_for_every_ncu_gate(gates_dir: Path, tmp_path: Path) -> None:
    config = load_config(gates_dir)
    peers = config.gates_through(7)
    plans = {}
    for spec in (s for s in peers if s.name.startswith("ncu-")):
        ctx = GateContext(spec=spec, config=config, run_dir=tmp_path, repo_root=tmp_path, seed=0, peers=peers)
        for name in spec.params.workloads:
            plans[spec.name, name] = shared.plan(ctx, config.workloads[name], spec.params)[2]
    # one profile of prefill-d128 for the three gates that read it, one of decode for the two
    assert (plans["ncu-sm", "prefill-d128"] == plans["ncu-sm-pipeline", "prefill-d128"]
            == plans["ncu-stalls", "prefill-d128"] == ("ncu-sm", "ncu-stalls", "ncu-sm-pipeline"))
    assert plans["ncu-stalls", "decode"] == plans["ncu-dram", "decode"] == ("ncu-dram", "ncu-stalls")
    # five workloads, five profiles: each (gate, workload) names the same sharing set as its workload's others
    by_workload = {w: {g for (g, w2), names in plans.items() if w2 == w} for (_, w) in plans}
    assert all(plans[g, w] == plans[next(iter(gs)), w] for w, gs in by_workload.items() for g in gs)


# ---- the engine tells each gate the run's gates ---------------------------------------------------


@dataclass(frozen=True)
class NoParams:
    pass


class PeersGate(Gate):
    """Reports the gates it was told run with it (in the gate worker, as the ncu gates run)."""

    Params = NoParams
    needs_gpu = True

    def run(self, ctx: GateContext) -> GateResult:
        return ctx.result([Check("peers", "names", None, None, Status.PASS, message=",".join(
            s.name for s in ctx.peers))], details={"pid": os.getpid()})


def test_the_engine_hands_every_gate_the_gates_of_its_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    names = ("peers-a", "peers-b", "peers-c")
    for name in names:
        monkeypatch.setitem(registry._REGISTRY, name, PeersGate)
    monkeypatch.setattr("harness.engine.cuda_unavailable_reason", lambda: None)
    config = Config(gates_dir=tmp_path, workloads=MappingProxyType({}), sets=MappingProxyType({}),
                    phases=(PhaseSpec(1, "p1", tuple(GateSpec(n, 1, NoParams()) for n in names)),))
    limits = WatchdogSettings(multiple=1.0, floor_s=60.0, startup_s=120.0, expected_s=dict.fromkeys(names, 1.0))
    run = run_phase(config, 1, run_id="t", run_dir=tmp_path, environment={}, repo_root=tmp_path, seed=1,
                    stream=io.StringIO(), live=False, only=("peers-a", "peers-c"), limits=limits)
    assert [(g.name, g.checks[0].message) for g in run.gates] == [("peers-a", "peers-a,peers-c"),
                                                                  ("peers-c", "peers-a,peers-c")]
    assert run.gates[0].details["pid"] != os.getpid()  # told in the gate worker, where the ncu gates run


# ---- on the GPU ----------------------------------------------------------------------------------


@pytest.mark.gpu
def test_the_two_sm_gates_judge_one_real_profile(tmp_path: Path) -> None:
    """Needs ncu, counter access and `make build`: ncu-sm and ncu-sm-pipeline as configured, in one run."""
    config = load_config(REPO / "gates")
    peers = tuple(s for s in config.gates_through(7) if s.name in ("ncu-sm", "ncu-sm-pipeline"))
    results = {}
    for spec in peers:
        ctx = GateContext(spec=spec, config=config, run_dir=tmp_path, repo_root=REPO, seed=0, peers=peers)
        results[spec.name] = GATES[spec.name]().run(ctx)
    assert [p.name for p in tmp_path.rglob("*.ncu-rep")] == ["prefill-d128.ncu-rep"]
    sm, pipeline = results["ncu-sm"], results["ncu-sm-pipeline"]
    for result in (sm, pipeline):
        assert result.status in (Status.PASS, Status.FAIL), result.message  # measured: a verdict, not an error
        assert "logs/ncu-sm/prefill-d128.ncu-rep" in result.logs
    assert sm.checks[0].measured == pipeline.checks[0].measured  # one profile, one number
