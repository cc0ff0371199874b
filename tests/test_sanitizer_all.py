"""The phase-7 sanitizer gate over every workload: its YAML entry and params, per-tool workloads, and the
gate-level budget (a run the budget cuts is an ERROR, the runs it leaves out are listed as not run, and the gate
is then an ERROR, never a pass); on the CPU, with the stand-in compute-sanitizer of test_sanitizer_gate."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest
import yaml
from conftest import REPO, make_context, workload
from test_render_samples import gate, run_of
from test_sanitizer_gate import install_fake, params

from harness.config import load_config
from harness.gates import registry
from harness.gates.sanitizer import SanitizerGate, run_sanitizer
from harness.gates.sanitizer_all import SanitizerAllGate, SanitizerAllParams
from harness.render import render_html
from harness.results import GateResult, Status
from harness.sanitizer.budget import SUBJECT, Budget, budget_check
from harness.sanitizer.cost import COST_FILE, load_cost_model
from harness.sanitizer.model import TOOLS
from harness.schema import ConfigError


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return install_fake(tmp_path, monkeypatch)


WORKLOADS = (workload("w1", causal=True, hq=4, hkv=1), workload("w2", d=128, dtype="fp16"))


def all_params(**kw: object) -> SanitizerAllParams:
    base = dataclasses.asdict(params())
    return SanitizerAllParams(**(base | {"budget_s": 60} | kw))  # type: ignore[arg-type]


def run_all(root: Path, p: SanitizerAllParams, steps: list[str] | None = None,
            budget: Budget | None = None) -> GateResult:
    ctx = make_context(root / "run", "sanitizer-all", p, WORKLOADS, repo_root=root)
    if steps is not None:
        ctx = dataclasses.replace(ctx, step=steps.append)
    return SanitizerAllGate().run(ctx) if budget is None else run_sanitizer(ctx, budget)


class FakeClock:
    """Seconds that move only when told: `tick` is called by the gate's progress hook."""

    def __init__(self, step_s: float = 0.0) -> None:
        self.now, self.step_s = 0.0, step_s

    def __call__(self) -> float:
        return self.now

    def tick(self, _: str) -> None:
        self.now += self.step_s


# ---- the budget (pure) ----------------------------------------------------------------------------


def test_budget_caps_each_timeout_by_what_is_left() -> None:
    clock = FakeClock()
    b = Budget(100, clock=clock)
    assert b.timeout(30) == (30, False)
    clock.now = 80
    assert b.left() == 20 and b.timeout(30) == (20, True)
    clock.now = 130
    assert b.left() == -30 and b.spent() == 130


def test_budget_check_passes_only_when_nothing_was_cut_or_left_out() -> None:
    clock = FakeClock()
    b = Budget(100, clock=clock)
    clock.now = 40
    ok = budget_check(b, [], [])
    assert (ok.status, ok.workload, ok.metric, ok.threshold, ok.measured, ok.margin) == \
        (Status.PASS, SUBJECT, "budget_s", 100, 40, 60)
    bad = budget_check(b, ["racecheck w1"], [f"racecheck w{i}" for i in range(2, 7)])
    assert bad.status is Status.ERROR
    assert bad.message == ("budget_s 100 s spent; 1 run cut short (racecheck w1); 5 not run: racecheck w2, "
                           "racecheck w3, racecheck w4 (+2 more)")
    assert budget_check(b, [], ["initcheck w2"]).status is Status.ERROR  # left out, nothing cut: still an ERROR


# ---- the gate on the CPU --------------------------------------------------------------------------


def test_registered_as_its_own_gate_reusing_the_sanitizer() -> None:
    assert registry.get("sanitizer-all") is SanitizerAllGate and registry.get("sanitizer") is SanitizerGate
    assert SanitizerAllGate.name == "sanitizer-all" and SanitizerGate.name == "sanitizer"
    assert SanitizerAllGate.needs_gpu and issubclass(SanitizerAllParams, type(params()))


def test_within_budget_passes_with_a_budget_check(fake: Path) -> None:
    steps: list[str] = []
    result = run_all(fake, all_params(), steps)
    assert result.status is Status.PASS, result.message
    assert [(c.metric, c.workload) for c in result.checks][:-1] == [(t, w) for t in TOOLS for w in ("w1", "w2")]
    last = result.checks[-1]
    assert (last.metric, last.workload, last.status, last.threshold) == ("budget_s", SUBJECT, Status.PASS, 60)
    d = result.details
    assert d["budget_s"] == 60 and d["not_run"] == [] and 0 <= d["budget_spent_s"] < 60
    # its own log directory: the phase-1 gate's logs in the same run directory are not overwritten
    assert all(r["log"].startswith("logs/sanitizer-all/") for r in d["runs"])
    assert (fake / "run" / "logs/sanitizer-all/racecheck-w2.log").is_file()
    # progress: what runs (with the budget left; the longest by the cost model first: racecheck), then how it ended
    # and in how many seconds
    assert steps[0].startswith("racecheck w1 (run 1/8, ") and "s of budget_s left" in steps[0]
    assert steps[1].startswith("racecheck w1: pass in ") and steps[1].endswith(" s")
    assert len(steps) == 16


def test_per_tool_workloads_override_the_default(fake: Path) -> None:
    p = all_params(tools=("memcheck", "racecheck"), racecheck_workloads=("w2",))
    result = run_all(fake, p)
    assert result.status is Status.PASS, result.message
    runs = [(c.metric, c.workload) for c in result.checks if c.metric != "budget_s"]
    assert runs == [("memcheck", "w1"), ("memcheck", "w2"), ("racecheck", "w2")]
    assert result.details["workloads_by_tool"] == {"memcheck": ["w1", "w2"], "racecheck": ["w2"]}
    argv = (fake / "fake" / "argv").read_text().splitlines()
    assert len(argv) == 3 and sum("--tool racecheck" in a for a in argv) == 1


def test_a_run_cut_by_the_budget_is_an_error_and_the_rest_are_listed_not_run(fake: Path) -> None:
    # runs start longest first by the shipped cost model: the first tool's two runs pass, the second tool (made to
    # hang) has its first run cut, and nothing else starts
    tools = ("memcheck", "synccheck", "initcheck")
    model = load_cost_model(REPO / COST_FILE)
    first, slow, last = sorted(tools, key=lambda t: -model.seconds(t, WORKLOADS[0]))
    (fake / "fake" / f"{slow}.sleep").write_text("30")
    p = all_params(tools=tools, budget_s=2, **{f"{slow}_timeout_s": 30})
    t0 = time.monotonic()
    result = run_all(fake, p)
    assert time.monotonic() - t0 < 15  # the budget, not the 30 s timeout, stopped it
    assert result.status is Status.ERROR
    status = {(c.metric, c.workload): c.status for c in result.checks}
    assert status[(first, "w1")] is status[(first, "w2")] is Status.PASS
    assert status[(slow, "w1")] is Status.ERROR
    left = [(t, w) for t in tools for w in ("w1", "w2") if t != first and (t, w) != (slow, "w1")]  # plan order
    assert [status[r] for r in left] == [Status.NOT_RUN] * 3
    assert status[("budget_s", SUBJECT)] is Status.ERROR
    cut = next(c for c in result.checks if (c.metric, c.workload) == (slow, "w1"))
    assert "the gate's budget_s (2 s) ran out during this run" in cut.message
    not_run = result.details["not_run"]
    assert [(r["tool"], r["workload"]) for r in not_run] == left  # in report (plan) order
    assert result.message.startswith(f"budget_s 2 s spent; 1 run cut short ({slow} w1); 3 not run: "
                                     f"{left[0][0]} w1")
    assert len(result.details["runs"]) == 3 and any(r["reason"] == cut.message for r in result.details["runs"])


def test_a_budget_spent_between_runs_is_an_error_not_a_pass(fake: Path) -> None:
    """No run was cut and every run made passed: the left-out runs alone make the gate an ERROR."""
    clock = FakeClock(step_s=10)  # 10 s per progress step: 20 s per run
    ctx = make_context(fake / "run", "sanitizer-all", all_params(budget_s=25), WORKLOADS, repo_root=fake)
    ctx = dataclasses.replace(ctx, step=clock.tick)
    result = run_sanitizer(ctx, Budget(25, clock=clock))
    made = [c for c in result.checks if c.status is Status.PASS]
    assert [(c.metric, c.workload) for c in made] == [("racecheck", "w1"), ("racecheck", "w2")]  # longest first
    assert len(result.details["not_run"]) == 6 and result.status is Status.ERROR
    assert "6 not run: memcheck w1, memcheck w2, synccheck w1 (+3 more)" in result.message


def test_the_phase1_gate_has_no_budget(fake: Path) -> None:
    ctx = make_context(fake / "run", "sanitizer", params(), WORKLOADS, repo_root=fake)
    result = SanitizerGate().run(ctx)
    assert result.status is Status.PASS and "budget_s" not in result.details
    assert "budget_s" not in {c.metric for c in result.checks}
    assert (fake / "run" / "logs/sanitizer/memcheck-w1.log").is_file()


def test_report_section_lists_the_not_run_runs(fake: Path) -> None:
    (fake / "fake" / "racecheck.sleep").write_text("30")  # the first to start (the longest by the cost model)
    result = run_all(fake, all_params(tools=("racecheck", "memcheck"), budget_s=1))
    html = render_html(run_of(gate("build", 1, Status.PASS), result))
    start = html.index('<section class="gate" id="gate-sanitizer-all"')
    section = html[start:html.index("</section>", start)]
    assert "budget_s 1 s, spent" in section and "3 runs: the" in section
    rows = section[section.index('data-tool="memcheck"'):]
    assert rows.count('data-status="not_run"') == 2 and "was spent before this run could start" in rows


# ---- the YAML -------------------------------------------------------------------------------------


def test_phase7_yaml_entry_covers_every_workload(gates_dir: Path) -> None:
    config = load_config(gates_dir)
    (spec,) = [g for g in config.phase(7).gates if g.name == "sanitizer-all"]
    p = spec.params
    assert isinstance(p, SanitizerAllParams) and p.budget_s > 0
    assert set(p.tools) == set(TOOLS) and p.tools[-1] == "racecheck"  # the slowest last: the budget drops it first
    phase1 = next(g for g in config.phase(1).gates if g.name == "sanitizer").params
    # phase 1's lists left out ("-set"): the main job, which runs both gates, sanitizes each workload once ...
    assert not set(p.workloads) & set(phase1.workloads)
    covered = {w for t in p.tools for w in p.workloads_for(t)} | set(phase1.workloads)
    # ... every workload but the batch-1 long-context pair (perf-fa3 reports them; minutes per sanitizer run each)
    assert covered == {n for n, w in config.workloads.items() if w.kind != "long-context"}
    assert any(config.workloads[w].seqlen_q == 8192 and config.workloads[w].batch == 4 for w in p.workloads)
    # ... with the same tools and settings in either gate (else leaving a workload out of one would drop a check)
    assert all(not getattr(q, f"{tool}_workloads") for tool in TOOLS for q in (p, phase1))
    assert (set(p.tools), p.padding, p.suppressions, p.fail_on_warnings) == \
        (set(phase1.tools), phase1.padding, phase1.suppressions, phase1.fail_on_warnings)


def edit_phase7(gates_dir: Path, **changes: object) -> None:
    path = gates_dir / "phases.yaml"
    data = yaml.safe_load(path.read_text())
    entry = data["phases"][7]["gates"]["sanitizer-all"]
    for k, v in changes.items():
        if v is None:
            entry.pop(k)
        else:
            entry[k] = v
    path.write_text(yaml.safe_dump(data))


def test_per_tool_workloads_from_yaml_expand_sets(gates_dir: Path) -> None:
    edit_phase7(gates_dir, racecheck_workloads=["sanitizer", "s17-causal"])
    config = load_config(gates_dir)
    p = next(g for g in config.phase(7).gates if g.name == "sanitizer-all").params
    assert p.workloads_for("racecheck") == (*config.sets["sanitizer"], "s17-causal")
    assert p.workloads_for("memcheck") == p.workloads
    assert [r for r in p.plan() if r[0] == "racecheck"] == [("racecheck", w) for w in p.workloads_for("racecheck")]


@pytest.mark.parametrize(("changes", "key", "why"), [
    ({"budget_s": None}, "sanitizer-all.budget_s", "required"),
    ({"budget_s": 0}, "sanitizer-all.budget_s", "must be > 0"),
    ({"racecheck_workloads": ["no-such-workload"]}, "racecheck_workloads", "unknown workload or set"),
    ({"racecheck_workloads": []}, "racecheck_workloads", "non-empty"),
    ({"tools": ["memcheck"], "racecheck_workloads": ["s1"]}, "racecheck_workloads", "racecheck is not in `tools`"),
    ({"memcheck_timeout_s": 0}, "memcheck_timeout_s", "must be > 0"),
])
def test_bad_params_are_config_errors(gates_dir: Path, changes: dict[str, object], key: str, why: str) -> None:
    edit_phase7(gates_dir, **changes)
    with pytest.raises(ConfigError, match=why) as e:
        load_config(gates_dir)
    assert key in e.value.key
