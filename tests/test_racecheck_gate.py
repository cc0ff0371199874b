"""The sanitizer gates with `racecheck_min_tiles_per_sm`: racecheck runs the reduced shape (harness/sanitizer/shrink.py)
and says so, the other tools run the whole one, the cost model deals and orders by the shape each run takes, a race
on a reduced run still fails the gate, the planted racecheck case does not depend on it, and the YAML knob is parsed
strictly; on the CPU, with the stand-in compute-sanitizer of test_sanitizer_gate."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml
from conftest import REPO, make_context, workload
from test_render_samples import gate, run_of
from test_sanitizer_gate import install_fake, params, replay
from test_sanitizer_selftest import config as selftest_config
from test_sanitizer_selftest import planted_root  # noqa: F401 - the fixture

import harness.gates.sanitizer as sanitizer_gate
from harness.config import load_config
from harness.driver_args import driver_args
from harness.gates.sanitizer import SanitizerGate, Setup, run_sanitizer
from harness.render import render_html
from harness.results import GateResult, Status
from harness.sanitizer import cost_fit, parallel
from harness.sanitizer.cost import COST_FILE, load_cost_model, longest_first, run_cost
from harness.sanitizer.model import TOOLS
from harness.schema import ConfigError, Workload
from harness.selftest_runs import planted_sanitizer
from harness.shard_plan import PARTS_ENV

MODEL = load_cost_model(REPO / COST_FILE)
BIG = workload("big", b=4, hq=16, hkv=16, sq=8192, sk=8192, d=128, causal=True)  # racecheck: B1 H10/10 at 132 SMs
SMALL = workload("small")
# not reduced (a cache), modelled between BIG's reduced and whole racecheck
CACHE = dataclasses.replace(workload("cache", b=2, hq=8, hkv=8, sq=8192, sk=8192, d=128), layout="kvcache",
                            seqlens_k=(8192, 8000))


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(sanitizer_gate, "gpu_sm_count", lambda: 132)
    return install_fake(tmp_path, monkeypatch)


def run(root: Path, workloads: tuple[Workload, ...] = (BIG, SMALL), fault: int = 0, **kw: object) -> GateResult:
    p = params(workloads=tuple(w.name for w in workloads), **({"racecheck_min_tiles_per_sm": 3} | kw))
    ctx = dataclasses.replace(make_context(root / "run", "sanitizer", p, workloads, repo_root=root), fault=fault)
    return run_sanitizer(ctx)


def commands(root: Path) -> dict[tuple[str, str], str]:
    """(tool, workload) -> the driver's flags of that run, from the stand-in's argv log."""
    out = {}
    for line in (root / "fake" / "argv").read_text().splitlines():
        tool = line.split("--tool ")[1].split()[0]
        name = next(w.name for w in (BIG, SMALL, CACHE) if f"--seqlen-q {w.seqlen_q} " in line
                    and (w.layout == "dense") == ("--layout" not in line))
        out[(tool, name)] = line.split("flashcore_driver ")[1]
    return out


def flags(wl: Workload, fault: int = 0) -> str:
    return " ".join(driver_args(wl, seed=0, fault=fault)).split(" --seed")[0]


def test_racecheck_runs_the_reduced_shape_and_every_other_tool_the_whole_one(fake: Path) -> None:
    result = run(fake, fault=5)
    assert result.status is Status.PASS, result.message
    cmds = commands(fake)
    small = dataclasses.replace(BIG, batch=1, heads_q=10, heads_kv=10)
    assert cmds[("racecheck", "big")].startswith(flags(small)) and "--fault 5" in cmds[("racecheck", "big")]
    for tool in TOOLS:
        assert cmds[(tool, "small")].startswith(flags(SMALL))
        if tool != "racecheck":
            assert cmds[(tool, "big")].startswith(flags(BIG)) and "--fault 5" in cmds[(tool, "big")]
    race = next(r for r in result.details["runs"] if (r["tool"], r["workload"]) == ("racecheck", "big"))
    assert race["shape"].startswith("B1 H10/10 of B4 H16/16 S8192x8192 D128 bf16 causal (racecheck's shared-memory")
    assert race["reduced"] == {"batch": 1, "heads_q": 10, "heads_kv": 10}
    assert race["model_s"] == round(MODEL.seconds("racecheck", small), 1) < MODEL.seconds("racecheck", BIG)
    mem = next(r for r in result.details["runs"] if (r["tool"], r["workload"]) == ("memcheck", "big"))
    assert mem["shape"] == BIG.label and "reduced" not in mem
    assert result.details["sm_count"] == 132
    assert "for 1 of 2 workloads, >= 3 query tiles per SM of 132 kept" in result.details["racecheck_shapes"]
    html = render_html(run_of(gate("build", 1, Status.PASS), result))
    assert "B1 H10/10 of B4 H16/16" in html and "query tiles per SM of 132 kept" in html


def test_no_knob_or_no_sm_count_runs_every_whole_shape(fake: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = run(fake, racecheck_min_tiles_per_sm=0)
    assert commands(fake)[("racecheck", "big")].startswith(flags(BIG))
    assert "racecheck_min_tiles_per_sm 0" in result.details["racecheck_shapes"]
    (fake / "fake" / "argv").unlink()
    monkeypatch.setattr(sanitizer_gate, "gpu_sm_count", lambda: None)
    result = run(fake)
    assert commands(fake)[("racecheck", "big")].startswith(flags(BIG))
    assert "SM count is unknown" in result.details["racecheck_shapes"] and result.details["sm_count"] is None
    assert all("reduced" not in r for r in result.details["runs"])


def test_each_part_names_the_whole_gates_reduced_racechecks(fake: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sharded run joins the parts' details by the first part's text: each part counts the whole gate's."""
    notes = []
    for i in (1, 2):
        monkeypatch.setenv(PARTS_ENV, f"sanitizer={i}/2")
        p = params(workloads=("big", "small"), racecheck_min_tiles_per_sm=3)
        result = SanitizerGate().run(make_context(fake / f"run{i}", "sanitizer", p, (BIG, SMALL), repo_root=fake))
        assert len({c.workload for c in result.checks}) == 1  # a share of the workloads ...
        notes.append(result.details["racecheck_shapes"])
    assert notes[0] == notes[1] and "for 1 of 2 workloads" in notes[0]  # ... and the gate's note


def test_a_race_on_the_reduced_run_still_fails_the_gate(fake: Path) -> None:
    replay(fake, "racecheck", "racecheck-race-exit0", 0)
    result = run(fake)
    assert result.status is Status.FAIL
    bad = [(c.metric, c.workload) for c in result.checks if c.status is not Status.PASS]
    assert bad == [("racecheck", "big"), ("racecheck", "small")]


def test_runs_start_longest_first_by_the_shape_they_run(fake: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parallel, "host_facts", lambda: (1, 1, None))  # one at a time: the start order is visible
    run(fake, workloads=(BIG, CACHE), tools=("racecheck",))
    started = [name for _, name in commands(fake)]
    assert started == ["cache", "big"]  # whole, big's racecheck (20 s) would start first; reduced it takes 10 s
    setup = Setup("", (), "", {}, MODEL, 132, 3)
    wls = {"big": BIG, "cache": CACHE}
    plan = [("racecheck", "big"), ("racecheck", "cache")]
    assert [plan[i] for i in longest_first(plan, run_cost(MODEL, wls, setup.shape))] == [
        ("racecheck", "cache"), ("racecheck", "big")]
    assert [plan[i] for i in longest_first(plan, run_cost(MODEL, wls))][0] == ("racecheck", "big")


def test_parts_are_dealt_by_the_reduced_cost_and_keep_every_run_once() -> None:
    config = load_config(REPO / "gates")
    p = next(g for g in config.gates_through(7) if g.name == "sanitizer-all").params
    plan = p.plan()
    cost = run_cost(MODEL, config.workloads, Setup("", (), "", {}, MODEL, 132, 3).shape)
    whole = run_cost(MODEL, config.workloads)
    assert cost("racecheck", "serve-varlen-prefill") < 0.3 * whole("racecheck", "serve-varlen-prefill")
    assert all(cost(t, w) == whole(t, w) for t, w in plan if t != "racecheck")
    parts = [parallel.share(plan, cost, i, 4) for i in (1, 2, 3, 4)]
    assert sorted(r for part in parts for r in part) == sorted(plan)
    loads = [sum(cost(*r) for r in part) for part in parts]
    before = [sum(whole(*r) for r in parallel.share(plan, whole, i, 4)) for i in (1, 2, 3, 4)]
    assert max(loads) < 1.1 * min(loads) and max(loads) < 0.85 * max(before)  # the longest part shrinks


def test_the_cost_fit_reads_the_shape_a_reduced_run_took() -> None:
    runs = [{"tool": "racecheck", "workload": "big", "wall_s": 12.0, "reduced": {"batch": 1, "heads_q": 10,
                                                                                   "heads_kv": 10}},
            {"tool": "memcheck", "workload": "big", "wall_s": 5.0}]
    (race, mem) = cost_fit.samples_from(runs, {"big": BIG})
    assert race[2] == pytest.approx(mem[2] * 10 / 64) and mem[2] == pytest.approx(4 * 16 * 8192 * 8192 / 2 / 1e9)


def test_the_planted_racecheck_case_runs_the_planted_program_whatever_the_knob(
        planted_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811 - the fixture
    """`make selftest`'s racecheck-race runs build/planted (tests/planted/planted.cu), a one-CTA program with no
    workload shape, under the sanitizer gate's settings: the reduction has nothing to reduce there, and the planted
    race stays red beside its clean control."""
    monkeypatch.setattr(sanitizer_gate, "gpu_sm_count", lambda: 132)
    config = selftest_config()
    spec = config.phases[0].gates[0]
    knob = dataclasses.replace(spec, params=dataclasses.replace(spec.params, racecheck_min_tiles_per_sm=3))
    config = dataclasses.replace(config, phases=(dataclasses.replace(config.phases[0], gates=(knob,)),))
    assert planted_sanitizer("racecheck", "race")(config, planted_root / "out" / "race", True) == {
        "sanitizer": Status.FAIL}
    assert planted_sanitizer("racecheck", "clean")(config, planted_root / "out" / "clean", False) == {
        "sanitizer": Status.PASS}


# ---- the YAML -------------------------------------------------------------------------------------

GATES = {"sanitizer": 1, "sanitizer-all": 7}


def test_both_sanitizer_gates_reduce_racecheck_alike() -> None:
    config = load_config(REPO / "gates")
    values = {g.name: g.params.racecheck_min_tiles_per_sm for g in config.gates_through(7) if g.name in GATES}
    assert values == {"sanitizer": 3, "sanitizer-all": 3}


@pytest.mark.parametrize("name", GATES)
@pytest.mark.parametrize(("key", "value", "why"), [
    ("racecheck_min_tiles_per_sm", -1, "must be >= 0"),
    ("racecheck_min_tiles_per_sm", 1.5, "must be an integer"),
    ("racecheck_min_tiles_per_sm", "3", "must be an integer"),
    ("racecheck_min_tiles_per_sm", True, "must be an integer"),
    ("racecheck_min_tile_per_sm", 3, "unknown key"),
])
def test_bad_knob_values_are_config_errors(gates_dir: Path, name: str, key: str, value: object, why: str) -> None:
    path = gates_dir / "phases.yaml"
    data = yaml.safe_load(path.read_text())
    data["phases"][GATES[name]]["gates"][name][key] = value
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=why) as e:
        load_config(gates_dir)
    assert f"{name}.{key}" in e.value.key


def test_absent_knob_is_no_reduction(gates_dir: Path) -> None:
    path = gates_dir / "phases.yaml"
    data = yaml.safe_load(path.read_text())
    del data["phases"][7]["gates"]["sanitizer-all"]["racecheck_min_tiles_per_sm"]
    path.write_text(yaml.safe_dump(data))
    p = next(g for g in load_config(gates_dir).gates_through(7) if g.name == "sanitizer-all").params
    assert p.racecheck_min_tiles_per_sm == 0
