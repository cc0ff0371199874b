"""Placement and time of a run over several GPUs (harness/shard_plan.py, harness/shard.py, the sanitizer's parallel
runs) with fake gates and fake timings: the shipped estimates without a history, longest first; sanitizer-all in
one part per worker whose shares cover every run once; runs at once bounded by cores and GPU memory; the perf group
alone on the host before the rest; several workers per GPU for the gates that do not measure, the measuring ones
never beside another worker on their GPU; the critical path; the parts joined into one verdict."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
from conftest import make_context, workload
from test_sanitizer_gate import install_fake, params

from harness import shard
from harness.gates.sanitizer import run_sanitizer
from harness.results import Check, GateResult, Status
from harness.sanitizer import parallel
from harness.sanitizer.cost import COST_FILE, load_cost_model, run_cost
from harness.sanitizer.model import TOOLS
from harness.schema import ConfigError
from harness.shard_plan import (
    PARTS_ENV,
    ShardSettings,
    Worker,
    critical_path,
    deal,
    gate_of,
    load_shard_settings,
    part_for,
    parts_env,
    plan,
    stage_names,
    stages,
)

REPO = Path(__file__).resolve().parent.parent
GATES = ["build", "correctness", "sanitizer", "perf-a", "perf-b", "ncu", "sanitizer-all", "api"]
FAKE = ShardSettings(first=("build",), together=(("perf-a", "perf-b"),), default_seconds=5.0,
                     isolated=("perf-a", "perf-b"), split=("sanitizer-all",),
                     seconds=MappingProxyType({"correctness": 20.0, "sanitizer": 80.0, "perf-a": 150.0,
                                               "perf-b": 20.0, "ncu": 10.0, "sanitizer-all": 360.0}),
                     measures=("perf-a", "perf-b", "ncu"))
SHARED3 = dataclasses.replace(FAKE, workers_per_gpu=3)


def load(placed: Mapping[Any, list[str]], settings: ShardSettings, seconds: dict[str, float]) -> dict[Any, float]:
    def w(token: str) -> float:
        name, _, part = token.partition("@")
        return settings.weight(name, seconds) / (int(part.split("/")[1]) if part else 1)

    return {gpu: sum(w(t) for t in ts) for gpu, ts in placed.items()}


def test_no_history_places_by_the_shipped_estimates_longest_first() -> None:
    placed = plan(GATES, [0, 1], FAKE, {})
    assert "sanitizer-all" in placed[0] and set(placed[1]) >= {"perf-a", "perf-b"}  # the two longest units apart
    assert max(load(placed, FAKE, {}).values()) == 360.0  # sanitizer-all alone outweighs the rest: its own GPU


def test_history_wins_over_the_estimate() -> None:
    placed = plan(GATES, [0, 1], FAKE, {"sanitizer-all": 10.0})
    assert "sanitizer-all" not in next(ts for ts in placed.values() if "perf-a" in ts) or len(placed) == 1
    assert load(placed, FAKE, {"sanitizer-all": 10.0})[next(g for g, ts in placed.items() if "perf-a" in ts)] \
        == 170.0  # the perf group is now the longest unit, alone on its GPU


def test_split_gate_runs_as_one_part_per_gpu_and_balances() -> None:
    rest = [g for g in GATES if g not in FAKE.isolated]  # the spread stage: the perf group ran before it
    placed = plan(rest, [0, 1, 2], FAKE, {}, split=True)
    parts = sorted(t for ts in placed.values() for t in ts if t.startswith("sanitizer-all"))
    assert parts == ["sanitizer-all@1/3", "sanitizer-all@2/3", "sanitizer-all@3/3"]
    assert sorted(next(g for g, ts in placed.items() if p in ts) for p in parts) == [0, 1, 2]
    assert max(load(placed, FAKE, {}).values()) <= 200.0  # was 360 as one unit
    with_perf = plan(GATES, [0, 1, 2], FAKE, {}, split=True)  # two parts never share a worker, even when uneven
    assert all(sum(t.startswith("sanitizer-all") for t in ts) == 1 for ts in with_perf.values())
    assert plan(GATES, [0], FAKE, {}, split=True)[0].count("sanitizer-all") == 1  # one GPU: whole


def test_isolation_rule_perf_group_runs_first_alone() -> None:
    got = stages(GATES, [0, 1], FAKE, {})
    assert got[0] == {Worker(0): ["perf-a", "perf-b"]}  # alone on the host: no other worker runs meanwhile
    rest = {t for ts in got[1].values() for t in ts}
    assert not rest & {"perf-a", "perf-b", "build"} and {"sanitizer-all@1/2", "sanitizer-all@2/2"} <= rest
    assert len(stages(GATES, [0], FAKE, {})) == 1  # one GPU: one worker, its gates one at a time anyway


# ---- several workers per GPU -----------------------------------------------------------------------------------


def measuring_workers_alone(got: list[dict[Worker, list[str]]], settings: ShardSettings) -> bool:
    """In every stage, a worker running a `measures` gate is the only worker on its GPU but for workers of
    `host_only` gates alone (which use no GPU)."""
    def host_only(ts: list[str]) -> bool:
        return all(gate_of(t) in settings.host_only for t in ts)

    return all(sum(o.gpu == w.gpu and not host_only(stage[o]) for o in stage) == 1 for stage in got
               for w, ts in stage.items() if any(gate_of(t) in settings.measures for t in ts))


HOST = dataclasses.replace(SHARED3, together=(("perf-a", "perf-b"), ("struct-a", "struct-b")),
                           host_only=("struct-a", "struct-b"))
GATES_HOST = [*GATES[:4], "struct-a", "struct-b", *GATES[4:]]


def test_one_gpu_runs_the_host_only_gates_beside_the_measuring_worker() -> None:
    got = stages(GATES_HOST, [0], HOST, {})
    assert got[1] == {Worker(0, 1, 2): ["ncu"], Worker(0, 2, 2): ["struct-a", "struct-b"]}
    assert not any(gate_of(t).startswith("struct") for ts in got[2].values() for t in ts)
    assert measuring_workers_alone(got, HOST)
    assert stage_names(got, HOST)[1] == "measuring, alone on the GPU, host-only gates beside it"
    # the control: listed nowhere, the same gates lengthen the shared stage and the measuring stage stays one worker
    plain = stages(GATES_HOST, [0], dataclasses.replace(HOST, host_only=()), {})
    assert plain[1] == {Worker(0): ["ncu"]} and any(gate_of(t) == "struct-a" for ts in plain[2].values() for t in ts)
    assert not measuring_workers_alone([{Worker(0, 1, 2): ["ncu"], Worker(0, 2, 2): ["correctness"]}], HOST)


@pytest.mark.parametrize("gpus", [[0, 1], [0, 1, 2]])
def test_several_gpus_keep_the_host_only_gates_off_the_ncu_worker(gpus: list[int]) -> None:
    """The ncu worker is the least loaded (ncu 10 s): the dealer would give it the structure gates, which instead
    go to another GPU's worker; the control, with nothing host-only, puts them on the ncu worker."""
    seconds = {"struct-a": 40.0, "struct-b": 1.0, "sanitizer": 20.0}  # the ncu worker stays the least loaded

    def holder(got: list[dict[Worker, list[str]]]) -> Worker:
        return next(w for w, ts in got[-1].items() if "struct-a" in ts)

    got = stages(GATES_HOST, gpus, HOST, seconds)
    assert holder(got).gpu != gpus[0] and "ncu" in got[-1][Worker(gpus[0])]
    control = stages(GATES_HOST, gpus, dataclasses.replace(HOST, host_only=()), seconds)
    assert holder(control) == Worker(gpus[0])


def test_without_a_measuring_gate_the_host_only_gates_stay_in_the_shared_stage() -> None:
    got = stages([g for g in GATES_HOST if g != "ncu"], [0], HOST, {})
    assert len(got) == 2 and any(gate_of(t) == "struct-a" for ts in got[1].values() for t in ts)


def test_one_gpu_with_three_workers_runs_the_rest_in_three_with_sanitizer_all_in_three_parts() -> None:
    got = stages(GATES, [0], SHARED3, {})
    assert got[:2] == [{Worker(0): ["perf-a", "perf-b"]}, {Worker(0): ["ncu"]}]  # each alone on the GPU
    last = got[2]
    assert list(last) == [Worker(0, 1, 3), Worker(0, 2, 3), Worker(0, 3, 3)]
    parts = sorted(t for ts in last.values() for t in ts if t.startswith("sanitizer-all"))
    assert parts == ["sanitizer-all@1/3", "sanitizer-all@2/3", "sanitizer-all@3/3"]
    assert all(sum(t.startswith("sanitizer-all") for t in ts) == 1 for ts in last.values())
    # longest first: a 120 s part each, then sanitizer (80 s) onto the first; one worker held 480 s of them
    assert max(load(last, SHARED3, {}).values()) == 200.0
    assert stage_names(got, SHARED3) == ["isolated, alone on the host", "measuring, alone on the GPU",
                                         "stage 3/3, 3 workers per GPU"]


def test_two_parts_of_one_gate_never_share_a_worker_of_a_gpu() -> None:
    # correctness (500 s) first onto worker 1: by load alone the third part would join worker 2's part
    last = stages(GATES, [0], SHARED3, {"correctness": 500.0})[-1]
    assert [sum(t.startswith("sanitizer-all") for t in ts) for ts in last.values()] == [1, 1, 1]


@pytest.mark.parametrize("gpus", [[0], [0, 1], [0, 1, 2]])
@pytest.mark.parametrize("per_gpu", [1, 2, 3, 4])
def test_measuring_gates_never_share_their_gpu_with_another_worker(gpus: list[int], per_gpu: int) -> None:
    settings = dataclasses.replace(FAKE, workers_per_gpu=per_gpu)
    got = stages(GATES, gpus, settings, {})
    assert measuring_workers_alone(got, settings)
    tokens = [gate_of(t) for st in got for ts in st.values() for t in ts]  # every gate once, sanitizer-all in parts
    assert sorted(set(tokens)) == sorted(g for g in GATES if g not in settings.first)
    assert all(tokens.count(g) == 1 for g in tokens if g != "sanitizer-all")
    assert got == stages(GATES, gpus, settings, {})  # every process computes the same placement


def test_measuring_gates_with_nothing_listed_would_share_a_gpu() -> None:
    """The check above can fail: without `measures` the ncu gate is dealt to a worker beside others."""
    plain = dataclasses.replace(SHARED3, measures=("perf-a", "perf-b"))
    assert not measuring_workers_alone(stages(GATES, [0], plain, {}), SHARED3)


def test_several_gpus_run_the_measuring_gates_alone_on_the_first_beside_the_shared_ones() -> None:
    first, last = stages(GATES, [0, 1], SHARED3, {})
    assert first == stages(GATES, [0, 1], FAKE, {})[0]  # the perf group's stage as with one worker per GPU
    assert [w for w in last if w.gpu == 0] == [Worker(0)] and "ncu" in last[Worker(0)]
    assert [w for w in last if w.gpu == 1] == [Worker(1, 1, 3), Worker(1, 2, 3), Worker(1, 3, 3)]
    # sanitizer-all in one part per worker that shares its GPU: the measuring worker has its share of the stage
    assert not any(t.startswith("sanitizer-all") for t in last[Worker(0)])
    assert sorted(t for ts in last.values() for t in ts if "@" in t) == [f"sanitizer-all@{i}/3" for i in (1, 2, 3)]


@pytest.mark.parametrize("gpus", [[0], [0, 1], [0, 1, 2, 3]])
def test_the_perf_group_stage_is_the_same_with_several_workers_per_gpu(gpus: list[int]) -> None:
    one, four = (stages(GATES, gpus, dataclasses.replace(FAKE, workers_per_gpu=n), {}) for n in (1, 4))
    perf = {Worker(0): ["perf-a", "perf-b"]}
    assert four[0] == (perf if len(gpus) == 1 else one[0])
    assert len(one) == (1 if len(gpus) == 1 else 2)  # one worker in all: one stage, its gates one at a time


@pytest.mark.parametrize(("edit", "key", "value"), [
    (("workers_per_gpu: 4", "workers_per_gpu: 0"), "workers_per_gpu", "0"),
    (("workers_per_gpu: 4", "workers_per_gpu: -2"), "workers_per_gpu", "-2"),
    (("workers_per_gpu: 4", "workers_per_gpu: 2.5"), "workers_per_gpu", "2.5"),
    (("workers_per_gpu: 4", "workers_per_gpu: four"), "workers_per_gpu", "'four'"),
    (("workers_per_gpu: 4", "workers_per_gpu: true"), "workers_per_gpu", "True"),
    (("measures: [perf-fa2, perf-cudnn,", "measures: [perf-cudnn,"), "measures", "['perf-cudnn'"),
    (("           ncu-dram, ncu-sm,", "           ncu-sm,"), "together[1]", "['ncu-dram'"),
    (("           ncu-dram,", "           sanitizer-all, ncu-dram,"), "split", "['sanitizer', 'sanitizer-all']"),
    (("measures: [perf-fa2,", "measures: [7, perf-fa2,"), "measures", "[7, "),
    (("host_only: [structure-tma, structure-wgmma]", "host_only: [structure-tma]"), "together[2]",
     "['structure-tma'"),
    (("host_only: [structure-tma, structure-wgmma]", "host_only: [structure-tma, structure-wgmma, ncu-sm]"),
     "host_only", "['structure-tma', 'structure-wgmma', 'ncu-sm']"),
    (("host_only: [structure-tma, structure-wgmma]", "host_only: structure-tma"), "host_only", "'structure-tma'"),
])  # fmt: skip
def test_bad_workers_or_measures_name_file_key_and_value(gates_dir: Path, edit: tuple[str, str], key: str,
                                                        value: str) -> None:
    path = gates_dir / "shard.yaml"
    assert edit[0] in path.read_text()
    path.write_text(path.read_text().replace(*edit))
    with pytest.raises(ConfigError) as got:
        load_shard_settings(gates_dir)
    assert str(got.value).startswith(f"{path}: {key} = {value}")


def test_repository_shard_file_isolates_the_perf_group_and_splits_both_sanitizer_gates() -> None:
    s = load_shard_settings(REPO / "gates")
    assert set(s.together[0]) == set(s.isolated) and s.split == ("sanitizer", "sanitizer-all")
    assert s.seconds["sanitizer-all"] > s.seconds["perf-fa2"] > s.default_seconds
    assert s.workers_per_gpu > 1 and set(s.isolated) | set(s.together[1]) == set(s.measures)  # ncu: measures
    assert set(s.host_only) == set(s.together[2]) == {"structure-tma", "structure-wgmma"}  # cuobjdump, no GPU


@pytest.mark.parametrize(("edit", "key"), [
    (("split: [sanitizer, sanitizer-all]", "split: [perf-fa2]"), "split"),
    (("isolated: [perf-fa2, perf-cudnn,", "isolated: [perf-cudnn,"), "together[0]"),
    (("  sanitizer-all: 100", "  sanitizer-all: 0"), "seconds.sanitizer-all"),
])
def test_bad_shard_file_names_the_key(gates_dir: Path, edit: tuple[str, str], key: str) -> None:
    path = gates_dir / "shard.yaml"
    assert edit[0] in path.read_text()
    path.write_text(path.read_text().replace(*edit))
    with pytest.raises(ConfigError, match=key.replace("[", r"\[").replace("]", r"\]")):
        load_shard_settings(gates_dir)


def test_critical_path_names_the_slowest_worker_of_each_stage() -> None:
    path = critical_path(["build"], 5.0, [{0: (["perf-a", "perf-b"], 170.0)},
                                          {0: (["sanitizer-all@1/2"], 90.0), 1: (["sanitizer-all@2/2", "api"], 120.0)}])
    assert path["seconds"] == 295.0
    assert [(leg["worker"], leg["seconds"]) for leg in path["legs"]] == [("parent", 5.0), ("GPU 0", 170.0),
                                                                          ("GPU 1", 120.0)]
    assert "GPU 1 120 s (sanitizer-all@2/2, api)" in path["text"]


# ---- sanitizer-all in parts, runs at once ------------------------------------------------------------------


WLS = {w.name: w for w in (workload("big", b=4, sq=4096, sk=4096, d=128), workload("mid", b=2, sq=1024, sk=1024),
                           workload("s1"), workload("s2"), workload("s3"))}
PLAN = [(t, w) for t in TOOLS for w in WLS]
MODEL = load_cost_model(REPO / COST_FILE)  # the shipped run-cost model


def test_sanitizer_parts_cover_every_run_once_and_keep_a_workloads_tools_together() -> None:
    shares = [parallel.share(PLAN, run_cost(MODEL, WLS), i, 3) for i in (1, 2, 3)]
    assert sorted(r for s in shares for r in s) == sorted(PLAN)
    for s in shares:
        for _, w in s:
            assert {t for t, x in s if x == w} == set(TOOLS)
    assert parallel.share(PLAN, run_cost(MODEL, WLS), 2, 3) == shares[1]  # the same in every worker
    assert [w for w, in [(w,) for _, w in shares[0]]][0] == "big"  # the costliest opens the first part


def test_sanitizer_parts_are_balanced_when_one_workload_is_huge() -> None:
    """Run times grow slowly with the size (the tool's start dominates): one huge workload must not get a part to
    itself while the other part runs everything else (the H200 run that taught it: 15 s against 130 s)."""
    wls = {w.name: w for w in [workload("huge", b=4, sq=8192, sk=8192, d=256)]
           + [workload(f"small{i}", b=2, sq=130, sk=130) for i in range(9)]}
    plan = [(t, w) for t in TOOLS for w in wls]
    counts = [len({w for _, w in parallel.share(plan, run_cost(MODEL, wls), i, 2)}) for i in (1, 2)]
    assert sorted(counts) == [5, 5]


def test_parts_env_round_trips() -> None:
    env = {PARTS_ENV: parts_env(["api", "sanitizer-all@2/3"])}
    assert part_for("sanitizer-all", env) == (2, 3) and part_for("sanitizer", env) is None
    with pytest.raises(ValueError, match="part 4 of 3"):
        part_for("sanitizer-all", {PARTS_ENV: "sanitizer-all=4/3"})


@pytest.mark.parametrize(("cores", "workers", "free", "expected"), [
    (16, 1, 140_000, 8),  # the cap
    (32, 2, 140_000, 8),  # 16 cores each, 2 per run
    (16, 4, 140_000, 2),  # 4 cores each
    (16, 1, 20_000, 2),  # GPU memory: 20 GB at 8 GB per run
    (16, 1, None, 1),  # free memory unknown: one at a time
    (1, 8, 0, 1),  # never below one
])
def test_concurrency_bound_by_cores_and_gpu_memory(cores: int, workers: int, free: int | None,
                                                   expected: int) -> None:
    runs, why = parallel.concurrency(parallel.Limits(8, 2, 8192), cores, workers, free)
    assert runs == expected and f"{runs} at once" in why


def test_deal_is_longest_first_onto_the_lightest() -> None:
    # b (10) -> 0, c (6) -> 1, d (5) -> 1 (6 < 10), a (1) -> 0 (10 < 11); each bin in the given order
    assert deal([("a", 1.0), ("b", 10.0), ("c", 6.0), ("d", 5.0)], 2) == [["a", "b"], ["c", "d"]]


def test_sanitizer_runs_several_at_once_with_the_verdicts_in_plan_order(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    root = install_fake(tmp_path, monkeypatch)
    for t in TOOLS:
        (root / "fake" / f"{t}.sleep").write_text("0.4")
    monkeypatch.setattr(parallel, "host_facts", lambda: (8, 1, 80_000))
    p = dataclasses.replace(params(), parallel_max=8, parallel_cpus_per_run=1)
    ctx = make_context(root / "run", "sanitizer", p, (workload("w1"), workload("w2")), repo_root=root)
    t0 = time.monotonic()
    result = run_sanitizer(ctx)
    assert time.monotonic() - t0 < 8 * 0.4  # 8 runs of 0.4 s overlapped
    assert result.status is Status.PASS and result.details["at_once"] == 8
    assert [(c.metric, c.workload) for c in result.checks] == [(t, w) for t in TOOLS for w in ("w1", "w2")]


def test_sanitizer_part_runs_only_its_share(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = install_fake(tmp_path, monkeypatch)
    monkeypatch.setattr(parallel, "host_facts", lambda: (2, 1, None))
    ctx = make_context(root / "run", "sanitizer", params(), (workload("w1"), workload("w2")), repo_root=root)
    one, two = run_sanitizer(ctx, part=(1, 2)), run_sanitizer(ctx, part=(2, 2))
    assert {c.workload for c in one.checks} | {c.workload for c in two.checks} == {"w1", "w2"}
    assert not {c.workload for c in one.checks} & {c.workload for c in two.checks}
    assert run_sanitizer(ctx, part=(3, 3)).status is Status.NOT_APPLICABLE  # more parts than workloads


def test_joined_parts_keep_every_check_and_the_worst_status() -> None:
    def part(status: Status, n: int) -> GateResult:
        return GateResult("sanitizer-all", 7, status, (Check(f"w{n}", "memcheck", 0, 0, status),), f"part {n}",
                          10.0 * n, (f"log{n}",), {"runs": [n], "wall_s_by_tool": {"memcheck": 1.5}})

    shards = shard.join_parts([(0, part(Status.PASS, 1)), (1, part(Status.FAIL, 2)),
                               (1, GateResult("api", 7, Status.PASS))])
    g = shards[0][0]
    assert g.status is Status.FAIL and [c.workload for c in g.checks] == ["w1", "w2"]
    assert g.details["runs"] == [1, 2] and g.details["wall_s_by_tool"] == {"memcheck": 3.0}
    assert [p["gpu"] for p in g.details["parts"]] == [0, 1] and g.elapsed_s == 20.0
    assert [r.name for r in shards[1]] == ["api"]


def test_parts_dealt_from_different_sm_counts_join_as_an_error() -> None:
    """Each sanitizer part deals the runs by the shapes its GPU's SM count gives the racechecks: parts that disagree
    may have dropped or doubled a run, so the joined gate is an ERROR saying so; parts that agree join as before."""
    def part(n: int, sms: int | None) -> GateResult:
        return GateResult("sanitizer-all", 7, Status.PASS, (Check(f"w{n}", "memcheck", 0, 0, Status.PASS),),
                          f"part {n}", 1.0, (), {"runs": [n], "dealt_by": {"sm_count": sms}})

    bad = shard.join_parts([(0, part(1, 132)), (1, part(2, None))])[0][0]
    assert bad.status is Status.ERROR and "dealt from different inputs" in bad.message and "132" in bad.message
    good = shard.join_parts([(0, part(1, 132)), (1, part(2, 132))])[0][0]
    assert good.status is Status.PASS and good.details["runs"] == [1, 2]
    assert good.details["dealt_by"] == {"sm_count": 132}  # the input, not summed over the parts


def test_shipped_estimates_come_from_a_run_and_print_as_the_yaml_block(capsys: pytest.CaptureFixture[str]) -> None:
    from harness import shard_costs

    evidence = REPO / "reports/evidence/phase7-h200-39558fd.json.xz"
    assert shard_costs.main([str(evidence)]) == 0
    printed = capsys.readouterr().out
    shipped = load_shard_settings(REPO / "gates").seconds
    # sanitizer-all ran as four parts at once (39-73 s each): it costs their sum, not its wall time
    assert printed.startswith("seconds:\n") and "  sanitizer-all: 100\n" in printed
    assert all(f"  {g}: {int(s)}\n" in printed for g, s in shipped.items())  # the shipped block is this run's
    assert shard_costs.seconds_block({"a": 0.2, "b": 7.1}, ["b", "a", "c"]) == "seconds:\n  b: 8\n  a: 1\n"


def test_a_gate_run_in_parts_weighs_the_sum_of_its_parts_in_the_history() -> None:
    from harness.history import store
    from harness.results import gate_work_seconds

    split = {"name": "sanitizer-all", "elapsed_s": 74.7,
             "details": {"parts": [{"gpu": 0, "elapsed_s": 71.8}, {"gpu": 1, "elapsed_s": 74.7}]}}
    whole = {"name": "api", "elapsed_s": 4.6, "details": {}}
    assert gate_work_seconds(split) == pytest.approx(146.5) and gate_work_seconds(whole) == 4.6
    assert gate_work_seconds({"name": "x", "elapsed_s": 3.0, "details": {"parts": [{"elapsed_s": "?"}]}}) == 3.0
    db = store.open_db(Path(":memory:"))
    run = {"run_id": "r1", "started_at": "2026-11-28T20:00:00Z", "phase": 7, "status": "fail",
           "gates": [split | {"phase": 7, "status": "pass"}, whole | {"phase": 7, "status": "pass"}]}
    assert store.record(db, run, "results.json")
    assert store.latest_gate_seconds(db) == {"sanitizer-all": pytest.approx(146.5), "api": 4.6}


def test_shard_costs_of_an_unreadable_file_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from harness import shard_costs

    (tmp_path / "bad.json").write_text("{cut")
    assert shard_costs.main([str(tmp_path / "bad.json")]) == 1
    assert "bad.json" in capsys.readouterr().err
