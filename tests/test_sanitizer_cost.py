"""The run-cost model of compute-sanitizer runs (harness/sanitizer/cost.py, gates/sanitizer-cost.yaml) and what uses
it: runs start longest first, parts are dealt by modelled seconds (balanced where log10 of the multiply-adds was
not), every worker computes the same parts, no run is lost or doubled, a bad model file is an ERROR naming file, key
and value, a planted fault is still red; and the refit command on a crafted results file."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, make_context, workload
from test_sanitizer_gate import install_fake, params, replay

from harness import shard
from harness.config import load_config
from harness.gates.sanitizer import run_sanitizer
from harness.results import Status
from harness.sanitizer import cost_fit, parallel
from harness.sanitizer.cost import COST_FILE, load_cost_model, longest_first, run_cost, scores
from harness.sanitizer.model import TOOLS
from harness.schema import ConfigError, Workload

MODEL = load_cost_model(REPO / COST_FILE)


def wl(name: str, b: int, h: int, s: int, d: int = 128, causal: bool = False) -> Workload:
    return workload(name, b=b, hq=h, hkv=h, sq=s, sk=s, d=d, causal=causal)


BIG, MID, TINY = wl("big", 4, 16, 8192), wl("mid", 4, 16, 2048), wl("tiny", 2, 2, 17, d=64)


def test_score_elements_count_visible_pairs_not_the_head_dim() -> None:
    assert scores(BIG) == 4 * 16 * 8192 * 8192
    assert scores(wl("d256", 4, 16, 8192, d=256)) == scores(BIG)
    assert scores(wl("causal", 4, 16, 8192, causal=True)) == scores(BIG) / 2


def test_runs_start_longest_first_by_the_model() -> None:
    wls = {w.name: w for w in (TINY, BIG, MID)}
    plan = [(t, w) for t in TOOLS for w in wls]
    cost = run_cost(MODEL, wls)
    start = [plan[i] for i in longest_first(plan, cost)]
    assert start[:2] == [("racecheck", "big"), ("racecheck", "mid")]  # the big shape's racecheck first
    seconds = [cost(*r) for r in start]
    assert seconds == sorted(seconds, reverse=True) and sorted(start) == sorted(plan)


def test_the_gate_starts_its_runs_longest_first_and_reports_them_in_plan_order(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = install_fake(tmp_path, monkeypatch)
    monkeypatch.setattr(parallel, "host_facts", lambda: (1, 1, None))  # one at a time: the start order is visible
    small, large = workload("small"), workload("large", b=4, hq=16, hkv=16, sq=4096, sk=4096, d=128)
    ctx = make_context(root / "run", "sanitizer", params(workloads=("small", "large")), (small, large),
                       repo_root=root)
    result = run_sanitizer(ctx)
    started = [(a.split("--tool ")[1].split()[0], "large" if "--heads-q 16" in a else "small")
               for a in (root / "fake" / "argv").read_text().splitlines()]
    assert started[0] == ("racecheck", "large") and started[-1][1] == "small"
    plan = params(workloads=("small", "large")).plan()
    assert started == [plan[i] for i in longest_first(plan, run_cost(MODEL, {"small": small, "large": large}))]
    assert [(c.metric, c.workload) for c in result.checks] == plan  # the report keeps the tool-by-tool order
    race = next(r for r in result.details["runs"] if (r["tool"], r["workload"]) == ("racecheck", "large"))
    assert race["model_s"] == round(MODEL.seconds("racecheck", large), 1)  # beside its wall_s


def log10_macs(w: Workload) -> float:
    """The estimate the parts were dealt by before the model: the decimal exponent of the multiply-adds."""
    return math.log10(10 * w.batch * w.heads_q * w.seqlen_q * w.seqlen_k * w.head_dim)


def test_dealing_balances_a_set_where_log10_macs_did_not() -> None:
    """Three big prefill shapes, six mid ones, six tiny ones in two parts. By log10 of the multiply-adds a mid
    shape weighs almost a big one (11.5 against 12.7), though its runs take less than half as long (its racecheck a
    fifth): the parts came out ~28 % apart (196 against 153 modelled seconds). By the model, longest first onto the
    lighter part, they differ by less than the smallest workload's runs (the bound of that greedy dealing when every
    tool of a workload goes to one part): 179 against 170."""
    wls = {w.name: w for w in [dataclasses.replace(BIG, name=f"big{i}") for i in range(3)]
           + [dataclasses.replace(MID, name=f"mid{i}") for i in range(6)]
           + [dataclasses.replace(TINY, name=f"tiny{i}") for i in range(6)]}
    plan = [(t, w) for t in TOOLS for w in wls]
    cost = run_cost(MODEL, wls)

    def loads(estimate: parallel.Callable[[str, str], float]) -> list[float]:
        return [sum(cost(*r) for r in parallel.share(plan, estimate, i, 2)) for i in (1, 2)]

    before = loads(lambda t, w: log10_macs(wls[w]))
    after = loads(cost)
    grain = min(sum(cost(t, w) for t in TOOLS) for w in wls)
    assert max(before) > 1.15 * min(before) and max(before) - min(before) > 2 * grain
    assert max(after) - min(after) < grain


def test_every_run_is_in_exactly_one_part_for_any_number_of_parts() -> None:
    config = load_config(REPO / "gates")
    spec = next(g for g in config.gates_through(7) if g.name == "sanitizer-all")
    p = dataclasses.replace(spec.params, racecheck_workloads=tuple(spec.params.workloads[:5]))  # per-tool lists too
    plan = p.plan()
    cost = run_cost(MODEL, config.workloads)
    for n in range(1, 8):
        runs = [r for i in range(1, n + 1) for r in parallel.share(plan, cost, i, n)]
        assert sorted(runs) == sorted(plan) and len(set(runs)) == len(plan)


def test_every_process_computes_the_same_parts() -> None:
    """Workers deal their shares independently: another interpreter (another hash seed) must get the same parts."""
    code = ("import json; from pathlib import Path; from harness.config import load_config; "
            "from harness.sanitizer import parallel; from harness.sanitizer.cost import COST_FILE, load_cost_model, "
            "run_cost; c = load_config(Path('gates')); "
            "p = next(g for g in c.gates_through(7) if g.name == 'sanitizer-all').params; "
            "cost = run_cost(load_cost_model(Path(COST_FILE)), c.workloads); "
            "print(json.dumps([parallel.share(p.plan(), cost, i, 4) for i in (1, 2, 3, 4)]))")
    config = load_config(REPO / "gates")
    p = next(g for g in config.gates_through(7) if g.name == "sanitizer-all").params
    here = [[list(r) for r in parallel.share(p.plan(), run_cost(MODEL, config.workloads), i, 4)] for i in (1, 2, 3, 4)]
    for seed in ("1", "2"):
        out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONHASHSEED": seed})
        assert json.loads(out.stdout) == here


def with_memcheck(entry: str, extra: str = "") -> str:
    """A model file whose other tools are good and whose memcheck entry is `entry`."""
    good = "".join(f"  {t}: {{start_s: 1, base_s: 1, s_per_g_scores: 0}}\n" for t in TOOLS if t != "memcheck")
    return f"tools:\n  memcheck: {entry}\n{good}{extra}"


@pytest.mark.parametrize(("text", "key", "shown"), [
    ("tools: {}\n", "tools.memcheck", "None"),  # a tool without a cost
    (with_memcheck("{start_s: 1, base_s: 1, s_per_g_scores: 0}",
                   "  leakcheck: {start_s: 1, base_s: 1, s_per_g_scores: 0}\n"),
     "tools.leakcheck", "base_s"),
    (with_memcheck("{start_s: 1, base_s: 0, s_per_g_scores: 0}"), "tools.memcheck.base_s", "0"),  # no run is free
    (with_memcheck("{start_s: 1, base_s: 1, s_per_g_scores: -2}"), "tools.memcheck.s_per_g_scores", "-2"),
    (with_memcheck("{start_s: 1, base_s: true, s_per_g_scores: 0}"), "tools.memcheck.base_s", "True"),
    (with_memcheck("{start_s: 1, base_s: '3', s_per_g_scores: 0}"), "tools.memcheck.base_s", "'3'"),
    (with_memcheck("{start_s: 1, base_s: .nan, s_per_g_scores: 0}"), "tools.memcheck.base_s", "nan"),
    (with_memcheck("{start_s: 1, base_s: 1, s_per_g_scores: .inf}"), "tools.memcheck.s_per_g_scores", "inf"),
    (with_memcheck("{start_s: 1, base_s: 1}"), "tools.memcheck.s_per_g_scores", "None"),
    (with_memcheck("{start_s: 1, base_s: 1, s_per_g_scores: 0, per_mac: 1}"), "tools.memcheck.per_mac", "1"),
    (with_memcheck("3"), "tools.memcheck", "3"),
    (with_memcheck("{base_s: 1, s_per_g_scores: 0}"), "tools.memcheck.start_s", "None"),  # every process starts
    (with_memcheck("{start_s: -1, base_s: 1, s_per_g_scores: 0}"), "tools.memcheck.start_s", "-1"),
    ("tools: [memcheck]\n", "tools", "['memcheck']"),
    (with_memcheck("{start_s: 1, base_s: 1, s_per_g_scores: 0}", "evidence: 3\n"), "evidence", "3"),
    (with_memcheck("{start_s: 1, base_s: 1, s_per_g_scores: 0}", "scale: 2\n"), "scale", "2"),
])
def test_a_bad_model_file_is_refused_naming_file_key_and_value(tmp_path: Path, text: str, key: str,
                                                               shown: str) -> None:
    file = tmp_path / "sanitizer-cost.yaml"
    file.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_cost_model(file)
    assert e.value.file == str(file) and e.value.key == key and shown in str(e.value)


def test_a_missing_model_file_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="sanitizer-cost.yaml: \\(file\\)"):
        load_cost_model(tmp_path / "sanitizer-cost.yaml")


def test_the_shipped_model_loads_and_racecheck_grows_fastest() -> None:
    c = MODEL.tools
    assert set(c) == set(TOOLS) and MODEL.evidence.startswith("reports/evidence/")
    assert c["racecheck"].s_per_g_scores == max(t.s_per_g_scores for t in c.values())
    assert 20 < MODEL.seconds("racecheck", BIG) < 60 and MODEL.seconds("memcheck", TINY) < 5


def test_a_bad_model_file_makes_the_gate_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = install_fake(tmp_path, monkeypatch)
    (root / COST_FILE).write_text("tools:\n  memcheck: {start_s: 0, base_s: -1, s_per_g_scores: 0}\n")
    ctx = make_context(root / "run", "sanitizer", params(), (workload("w1"), workload("w2")), repo_root=root)
    result = run_sanitizer(ctx)
    assert result.status is Status.ERROR and "tools.memcheck.base_s = -1" in result.message
    assert not (root / "fake" / "argv").exists()  # nothing ran


@pytest.mark.parametrize("tool", ["memcheck", "racecheck"])  # the last to start and the first
def test_a_planted_fault_turns_the_joined_parts_red(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    tool: str) -> None:
    root = install_fake(tmp_path, monkeypatch)
    replay(root, tool, "memcheck-oob" if tool == "memcheck" else "racecheck-race", 86)
    monkeypatch.setattr(parallel, "host_facts", lambda: (4, 1, 80_000))
    wls = (workload("w1"), workload("w2"), workload("w3", b=4, hq=16, hkv=16, sq=2048, sk=2048, d=128))
    p = dataclasses.replace(params(workloads=("w1", "w2", "w3")), parallel_max=4)
    ctx = make_context(root / "run", "sanitizer", p, wls, repo_root=root)
    parts = [run_sanitizer(ctx, part=(i, 2)) for i in (1, 2)]
    joined = shard.join_parts([(0, parts[0]), (0, parts[1])], parted={"sanitizer"})[0][0]
    assert joined.status is Status.FAIL
    assert {c.workload for c in joined.checks if c.metric == tool and c.status is Status.FAIL} == {"w1", "w2", "w3"}
    assert len(joined.checks) == 12  # every (tool, workload) once


def test_refit_recovers_the_coefficients_of_a_crafted_run(tmp_path: Path) -> None:
    """A results file whose processes take known seconds (runs alone and batches of several sizes): the fit gives
    the start, base and slope back, and --check of the same run scaled by 2 reports the scale."""
    config = load_config(REPO / "gates")
    names = [n for n in config.workloads if config.workloads[n].dense][:12]
    truth = {"memcheck": (3.0, 0.2, 0.1), "racecheck": (5.0, 0.5, 6.0), "synccheck": (3.5, 0.3, 0.2),
             "initcheck": (4.0, 0.25, 0.5)}

    def secs(tool: str, group: list[str]) -> float:
        a, b, c = truth[tool]
        return a + sum(b + c * scores(config.workloads[n]) / 1e9 for n in group)

    groups = [names[:1], names[1:2], names[2:5], names[5:12]]  # alone, alone, three, seven
    runs = [{"tool": t, "workload": n, "wall_s": secs(t, g) if len(g) == 1 else None} | (
            {"batch": f"{t}-{g[0]}"} if len(g) > 1 else {}) for t in truth for g in groups for n in g]
    batches = [{"tool": t, "workloads": g, "wall_s": secs(t, g), "log": f"{t}-{g[0]}", "status": "pass"}
               for t in truth for g in groups if len(g) > 1]
    data = cost_fit.samples_from(runs, config.workloads, batches)
    assert len(data) == 4 * len(groups)  # one sample per process, none per workload of a batch
    model = cost_fit.fit(data)
    for t, (a, b, c) in truth.items():
        got = model.tools[t]
        assert (got.start_s, got.base_s, got.s_per_g_scores) == pytest.approx((a, b, c), rel=1e-6)
    doubled = [(t, n, x, 2 * y) for t, n, x, y in data]
    assert cost_fit.common_scale(model, doubled) == pytest.approx(2.0)
    assert cost_fit.quality(model, doubled, 2.0)[1] == pytest.approx(1.0)
    assert "  racecheck: {start_s: 5.00, base_s: 0.50, s_per_g_scores: 6.000}" in cost_fit.block(model)


def test_runs_one_per_process_give_the_start_to_the_base() -> None:
    """Without batches the start and the base are one constant: the fit puts it in the base (start 0), never a
    negative or arbitrary split."""
    rows = [(1.0, 1.0, g) for g in (0.1, 0.5, 2.0, 4.0)]
    start, base, slope = cost_fit.fit_tool(rows, [3.0 + 2.0 * r[2] for r in rows])
    assert (start, base, slope) == pytest.approx((0.0, 3.0, 2.0))


def test_the_shipped_model_is_the_fit_of_the_evidence_it_names(capsys: pytest.CaptureFixture[str]) -> None:
    """The refit command on the run the YAML names prints the YAML's own coefficients; --check of an older run (8
    runs at once, one process each, whole racecheck shapes) reports its scale."""
    other = REPO / "reports/evidence/phase7-h200-3ff498f.json.xz"
    assert cost_fit.main([str(REPO / MODEL.evidence), "--check", str(other), "--gates-dir", str(REPO / "gates")]) == 0
    out, err = capsys.readouterr()
    shipped = (REPO / COST_FILE).read_text()
    assert out.startswith("tools:\n") and all(line in shipped for line in out.splitlines())
    assert "fitted to 45 processes" in err and "448 processes" in err and "times 0.68" in err
