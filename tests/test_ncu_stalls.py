"""ncu-stalls gate: the warp-stall table from a real WarpStateStats capture, the baseline comparison, the gate
end to end with a stand-in ncu, and its report section (sorted table with bars)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import make_context
from test_ncu_gates import DECODE, FIXTURES, PREFILL, fake_ncu

from harness.gates.ncu_stalls import NcuStallParams, NcuStallsGate, verdict_baseline
from harness.ncu.parse import group_kernels, parse_csv
from harness.ncu.stalls import baseline_from_results, read_baseline, stall_table, total
from harness.render import render_html
from harness.results import GateResult, RunResult, Status

REGEX = r"smsp__average_warps_issue_stalled_(?P<reason>\w+?)_per_issue_active\.ratio"
TENSOR = "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"
OCCUPANCY = "sm__warps_active.avg.pct_of_peak_sustained_active"


def stalls_csv(tmp_path: Path, tensor: str | None = "77.32") -> Path:
    """The real stall capture, with a tensor-pipe column added (the capture has the sections only)."""
    lines = (FIXTURES / "ours-prefill-stalls.csv").read_text().splitlines()
    if tensor is not None:
        extra = [f'"{TENSOR}"', '"%"'] + [f'"{tensor}"'] * (len(lines) - 2)
        lines = [f"{line},{cell}" for line, cell in zip(lines, extra, strict=True)]
    path = tmp_path / "stalls.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def params(ncu: Path, **changes: object) -> NcuStallParams:
    values: dict[str, object] = dict(
        workloads=("prefill-d128",), kernel_filter="attention_forward", metrics=("gpu__time_duration.sum",),
        sections=("WarpStateStats", "Occupancy"), launch_skip=1, launch_count=1, timeout_s=30, driver="driver",
        ncu=str(ncu), stall_metric_regex=REGEX, tensor_metric=TENSOR, occupancy_metric=OCCUPANCY,
        baseline="evidence/baseline.json")
    values.update(changes)
    return NcuStallParams(**values)  # type: ignore[arg-type]


def run(tmp_path: Path, p: NcuStallParams, name: str = "run") -> GateResult:
    ctx = make_context(tmp_path / name, "ncu-stalls", p, (DECODE, PREFILL), repo_root=tmp_path)
    return NcuStallsGate().run(ctx)


# ---- the stall table (pure) -----------------------------------------------------------------------


def test_stall_table_is_sorted_and_sums_to_the_warp_latency() -> None:
    csv = parse_csv((FIXTURES / "ours-prefill-stalls.csv").read_text())
    (kernel,) = group_kernels(csv.launches)
    stalls = stall_table(kernel, csv.columns, REGEX)
    assert len(stalls) == 19
    assert [(s.reason, s.value) for s in stalls[:4]] == [
        ("long_scoreboard", 1.73), ("selected", 1.00), ("wait", 0.89), ("not_selected", 0.55)]
    values = [s.value for s in stalls]
    assert values == sorted(values, reverse=True)  # type: ignore[type-var]
    latency = kernel.median("smsp__average_warp_latency_per_inst_issued.ratio")
    assert total(stalls) == pytest.approx(latency, abs=0.02)  # 5.38 vs 5.39: the breakdown is complete
    assert kernel.median(OCCUPANCY) == 15.33


def test_the_installed_ncu_names_the_stall_reasons_this_way() -> None:
    names = (FIXTURES / "stall-metric-names.txt").read_text()
    csv = parse_csv((FIXTURES / "ours-prefill-stalls.csv").read_text())
    (kernel,) = group_kernels(csv.launches)
    for s in stall_table(kernel, csv.columns, REGEX):
        assert f"smsp__average_warps_issue_stalled_{s.reason}_per_issue_active " in names
        assert f"smsp__average_warp_latency_issue_stalled_{s.reason} " in names


def test_baseline_changes_per_reason() -> None:
    csv = parse_csv((FIXTURES / "ours-prefill-stalls.csv").read_text())
    (kernel,) = group_kernels(csv.launches)
    stalls = stall_table(kernel, csv.columns, REGEX, {"long_scoreboard": 2.0, "wait": 0.5, "gone": 1.0})
    by_reason = {s.reason: s for s in stalls}
    assert by_reason["long_scoreboard"].delta == pytest.approx(-0.27)
    assert by_reason["wait"].delta == pytest.approx(0.39)
    assert by_reason["selected"].baseline is None and by_reason["selected"].delta is None


def test_baseline_from_a_results_json() -> None:
    data = {"run_id": "r1", "gates": [{"name": "ncu-stalls", "details": {"workloads": {
        "decode": {"stalls": [{"reason": "long_scoreboard", "value": 3.0}]}, "broken": {"error": "x"}}}}]}
    base = baseline_from_results(data, "ncu-stalls", "b.json")
    assert (base.status, base.run_id) == ("loaded", "r1")
    assert base.for_workload("decode") == {"long_scoreboard": 3.0} and base.for_workload("broken") is None
    assert baseline_from_results({"gates": []}, "ncu-stalls", "b.json").status == "unreadable"
    assert baseline_from_results([1, 2], "ncu-stalls", "b.json").status == "unreadable"


def test_baseline_file_states(tmp_path: Path) -> None:
    assert read_baseline(tmp_path / "none.json", "none.json", "ncu-stalls").status == "missing"
    (tmp_path / "bad.json").write_text("{not json")
    assert read_baseline(tmp_path / "bad.json", "bad.json", "ncu-stalls").status == "unreadable"
    missing = read_baseline(tmp_path / "none.json", "none.json", "ncu-stalls")
    assert verdict_baseline("w", missing, False, required=False) is None
    required = verdict_baseline("w", missing, False, required=True)
    assert required is not None and required.status is Status.ERROR and "no baseline stored" in required.message
    bad = verdict_baseline("w", read_baseline(tmp_path / "bad.json", "bad.json", "ncu-stalls"), False, False)
    assert bad is not None and bad.status is Status.ERROR


def test_an_xz_compressed_baseline_loads_as_the_plain_one(tmp_path: Path) -> None:
    """A stored run kept as .json.xz (reports/evidence/) is read as render and history read it; bytes that are not
    xz data are `unreadable`, as a broken .json is."""
    import json
    import lzma

    data = {"run_id": "r1", "gates": [{"name": "ncu-stalls", "details": {"workloads": {
        "decode": {"stalls": [{"reason": "long_scoreboard", "value": 3.0}]}}}}]}
    (tmp_path / "run.json.xz").write_bytes(lzma.compress(json.dumps(data).encode()))
    base = read_baseline(tmp_path / "run.json.xz", "run.json.xz", "ncu-stalls")
    assert (base.status, base.for_workload("decode")) == ("loaded", {"long_scoreboard": 3.0})
    (tmp_path / "bad.json.xz").write_bytes(b"not xz")
    assert read_baseline(tmp_path / "bad.json.xz", "bad.json.xz", "ncu-stalls").status == "unreadable"


# ---- the gate, end to end with a stand-in ncu -----------------------------------------------------


def test_gate_records_stalls_and_notes_a_missing_baseline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ncu = fake_ncu(tmp_path, monkeypatch, {8192: stalls_csv(tmp_path)})
    result = run(tmp_path, params(ncu))
    assert result.status is Status.PASS, result.message
    assert [c.metric for c in result.checks] == ["warp_stalls", TENSOR, OCCUPANCY]
    assert result.checks[0].measured == pytest.approx(5.38) and "top: long_scoreboard 1.73" in result.checks[0].message
    assert "no baseline stored at evidence/baseline.json" in result.message
    w = result.details["workloads"]["prefill-d128"]
    assert (w["tensor_pct"], w["occupancy_pct"], w["stall_max"], w["has_baseline"]) == (77.32, 15.33, 1.73, False)
    assert w["stalls"][0] == {"reason": "long_scoreboard", "value": 1.73, "baseline": None, "delta": None}
    assert result.details["baseline"]["status"] == "missing"
    args = json.loads((tmp_path / "ncu-args.jsonl").read_text().splitlines()[0])
    assert args[args.index("--metrics") + 1] == f"gpu__time_duration.sum,{TENSOR},{OCCUPANCY}"
    assert [args[i + 1] for i, a in enumerate(args) if a == "--section"] == ["WarpStateStats", "Occupancy"]


def test_gate_compares_with_a_stored_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ncu = fake_ncu(tmp_path, monkeypatch, {8192: stalls_csv(tmp_path)})
    first = run(tmp_path, params(ncu), "first")
    stored = RunResult("first-run", 4, (first,), {}, "2025-01-01T00:00:00Z", 1.0).to_dict()
    stored["gates"][0]["details"]["workloads"]["prefill-d128"]["stalls"][0]["value"] = 1.23  # long_scoreboard
    (tmp_path / "evidence").mkdir()
    (tmp_path / "evidence/baseline.json").write_text(json.dumps(stored))
    result = run(tmp_path, params(ncu, require_baseline=True), "second")
    assert result.status is Status.PASS, result.message
    assert result.checks[-1].metric == "baseline" and "long_scoreboard +0.50" in result.checks[-1].message
    w = result.details["workloads"]["prefill-d128"]
    assert w["stalls"][0]["delta"] == pytest.approx(0.5) and w["has_baseline"]
    html = render_html(RunResult("r", 4, (result,), {}, "2025-01-01T00:00:00Z", 1.0))
    assert html.count('<tr class="stall"') == 19 and "+0.50" in html and "<th>baseline</th>" in html
    assert html.index('data-reason="long_scoreboard"') < html.index('data-reason="selected"')
    assert "width: 100.0%" in html  # the largest stall fills its bar
    assert "achieved occupancy" in html and "15.33 %" in html and "77.32 %" in html and "ncu 2025.3.1.0" in html


@pytest.mark.parametrize(("change", "words"), [
    ({"tensor": None}, [TENSOR, "missing"]),
    ({"require_baseline": True}, ["no baseline stored"]),
    ({"stall_metric_regex": r"smsp__nothing_(\w+)"}, ["no column matches", "WarpStateStats"]),
])
def test_unmeasured_parts_are_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: dict[str, object],
                                     words: list[str]) -> None:
    tensor = change.pop("tensor", "77.32")
    ncu = fake_ncu(tmp_path, monkeypatch, {8192: stalls_csv(tmp_path, tensor)})  # type: ignore[arg-type]
    result = run(tmp_path, params(ncu, **change))
    assert result.status is Status.ERROR
    assert all(w in result.message for w in words), result.message


def test_profiler_error_is_an_error_and_the_section_still_renders(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    ncu = fake_ncu(tmp_path, monkeypatch, {8192: stalls_csv(tmp_path)}, mode="perm")
    result = run(tmp_path, params(ncu))
    assert result.status is Status.ERROR and "ERR_NVGPUCTRPERM" in result.message
    html = render_html(RunResult("r", 4, (result,), {}, "2025-01-01T00:00:00Z", 1.0))
    assert "NVreg_RestrictProfilingToAdminUsers=0" in html and '<tr class="stall"' not in html
    bad = run(tmp_path, params(ncu, stall_metric_regex="(unclosed"), "bad")
    assert bad.status is Status.ERROR and "is not a regex" in bad.message
