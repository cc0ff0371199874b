"""The run history (harness/history): a gate run's numbers go into SQLite once, stored runs import, and the trend
view flags a change beyond the run-to-run spread (a planted 10 % drop must be flagged; noise must not)."""

from __future__ import annotations

import copy
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from harness import cli
from harness.config import load_config
from harness.history import store
from harness.history.cli import record_run
from harness.history.trends import HistorySettings, change_flag, load_history_settings, trends
from harness.schema import ConfigError

REPO = Path(__file__).resolve().parent.parent
SETTINGS = HistorySettings("reports/history.sqlite", 10, ("speed_vs_",), 3.0, 0.03)


def run(run_id: str, started: str, ratio: float, spread: float = 0.005, gpu: str = "H100", commit: str = "a" * 40,
        status: str = "pass") -> dict[str, Any]:
    checks = [{"workload": "prefill-d128", "metric": "rel_std[speed_vs_fa3]", "measured": spread, "threshold": 0.02,
               "status": "pass"},
              {"workload": "prefill-d128", "metric": "speed_vs_fa3", "measured": ratio, "threshold": 0.85,
               "comparison": ">=", "status": status},
              {"workload": "prefill-d128", "metric": "err", "measured": "inf", "threshold": 1.0,
               "status": "not_applicable"}]
    return {"schema": "flashcore.run/1", "run_id": run_id, "started_at": started, "phase": 4, "status": status,
            "elapsed_s": 100.0,
            "environment": {"gpu": gpu, "git_commit": commit, "driver": "580", "torch": "2.11"},
            "gates": [{"name": "perf-fa3", "phase": 4, "status": status, "elapsed_s": 9.0, "checks": checks}]}


@pytest.fixture
def db(tmp_path: Path) -> sqlite3.Connection:
    return store.open_db(tmp_path / "h" / "history.sqlite")


def test_a_run_is_recorded_once_with_its_spread(db: sqlite3.Connection) -> None:
    assert store.record(db, run("r1", "2026-01-01T00:00:00Z", 0.97), "x")
    assert not store.record(db, run("r1", "2026-01-01T00:00:00Z", 0.50), "x")  # same run id: unchanged
    store.record(db, run("r2", "2026-01-02T00:00:00Z", 0.98, spread=0.01), "y")
    pts = store.series(db, "perf-fa3", "prefill-d128", "speed_vs_fa3", 10)
    assert [(p.run_id, p.value, p.rel_std) for p in pts] == [("r1", 0.97, 0.005), ("r2", 0.98, 0.01)]
    assert store.series(db, "perf-fa3", "prefill-d128", "err", 10) == []  # a non-finite value is not a number
    assert [r[0] for r in store.runs(db, 1)] == ["r2"]


@pytest.mark.parametrize("new, spread, gpu, flagged", [
    (0.873, 0.005, "H100", True),   # planted: 10 % slower, spreads 0.5 %
    (0.965, 0.005, "H100", False),  # 0.5 % down: noise
    (0.873, 0.05, "H100", False),   # 10 % with 5 % spreads: within 3 combined spreads
    (0.873, 0.005, "H200", False),  # another GPU: not comparable
])  # fmt: skip
def test_a_change_beyond_the_spread_is_flagged(db: sqlite3.Connection, new: float, spread: float, gpu: str,
                                               flagged: bool) -> None:
    store.record(db, run("r1", "2026-01-01T00:00:00Z", 0.97, spread=spread, gpu=gpu), "x")
    store.record(db, run("r2", "2026-01-02T00:00:00Z", new, spread=spread), "y")
    (t,) = trends(db, SETTINGS)
    assert (t.flag is not None) is flagged, t.flag
    if flagged:
        assert t.flag.startswith("-10.00% since aaaaaaa")


def test_a_series_without_a_spread_uses_the_min_change(db: sqlite3.Connection) -> None:
    a, b = run("r1", "2026-01-01T00:00:00Z", 1.0), run("r2", "2026-01-02T00:00:00Z", 1.04)
    for r in (a, b):
        r["gates"][0]["checks"] = r["gates"][0]["checks"][1:]  # no rel_std check
        store.record(db, r, "x")
    pts = store.series(db, "perf-fa3", "prefill-d128", "speed_vs_fa3", 10)
    assert pts[-1].rel_std is None and change_flag(pts[0], pts[1], SETTINGS) is not None
    assert change_flag(pts[0], pts[1], HistorySettings("h.sqlite", 10, ("s",), 3.0, 0.05)) is None


def test_the_repository_settings_load_and_a_bad_key_is_named(gates_dir: Path) -> None:
    s = load_history_settings(REPO / "gates")
    assert s.file == "reports/history.sqlite" and s.flag_sigmas > 0 and "speed_vs_" in s.metrics
    path = gates_dir / "history.yaml"
    path.write_text(path.read_text().replace("last: 10", "last: 0"))
    with pytest.raises(ConfigError, match="last"):
        load_history_settings(gates_dir)


def test_a_foreign_or_newer_file_is_refused(tmp_path: Path) -> None:
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not sqlite at all" * 100)
    with pytest.raises(store.HistoryError, match="not a FlashCore history"):
        store.open_db(junk)
    newer = tmp_path / "newer.sqlite"
    store.open_db(newer).execute("UPDATE meta SET value = '99' WHERE key = 'schema'").connection.commit()
    with pytest.raises(store.HistoryError, match="schema 99"):
        store.open_db(newer)


def test_record_run_never_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLASHCORE_HISTORY", str(tmp_path / "h.sqlite"))
    config = load_config(REPO / "gates")
    assert "recorded in" in record_run(run("r1", "2026-01-01T00:00:00Z", 1.0), config, "x")
    assert "already in" in record_run(run("r1", "2026-01-01T00:00:00Z", 1.0), config, "x")
    broken = copy.deepcopy(run("r2", "2026-01-01T00:00:00Z", 1.0))
    del broken["gates"]
    assert "not recorded" in record_run(broken, config, "x")
    (tmp_path / "dir.sqlite").mkdir()
    monkeypatch.setenv("FLASHCORE_HISTORY", str(tmp_path / "dir.sqlite"))
    assert "not recorded" in record_run(run("r3", "2026-01-01T00:00:00Z", 1.0), config, "x")


def test_history_command_imports_stored_runs_and_prints_the_trend(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    import json

    files = []
    for i, ratio in enumerate((0.97, 0.97, 0.87)):
        f = tmp_path / f"r{i}.json"
        f.write_text(json.dumps(run(f"r{i}", f"2026-01-0{i + 1}T00:00:00Z", ratio)))
        files.append(str(f))
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    db = tmp_path / "h.sqlite"
    assert cli.main(["history", "--db", str(db), "--import", *files, str(bad), "--flagged"]) == 0
    out, err = capsys.readouterr()
    assert out.count("imported:") == 3 and "skipped" in err and "expected 'flashcore.run/1'" in err
    assert "perf-fa3 prefill-d128 speed_vs_fa3" in out and "CHANGED -10.31% since aaaaaaa" in out
    assert "1 series, 1 flagged" in out
    assert cli.main(["history", "--db", str(tmp_path / "none.sqlite")]) == 1
    assert "does not exist yet" in capsys.readouterr().err


def test_the_evidence_runs_import(tmp_path: Path) -> None:
    db = store.open_db(tmp_path / "h.sqlite")
    imported = 0
    files = sorted((REPO / "reports/evidence").glob("phase*.json*"))
    assert any(f.suffix == ".xz" for f in files)  # the stored runs are kept xz-compressed
    for f in files:
        try:
            imported += store.import_file(db, f)
        except store.HistoryError as e:  # a gate-only extract (phase5-gates-*.json) is not a run
            assert "expected 'flashcore.run/1'" in str(e)
    assert imported >= 5 and len(store.runs(db, 100)) == imported
    assert store.series_keys(db, ("geomean_speed_vs_fa3",))


PANELS = load_history_settings(REPO / "gates").plots


def test_the_trend_report_draws_this_gpus_runs_and_flags_this_runs_moves(db: sqlite3.Connection,
                                                                         tmp_path: Path) -> None:
    from harness.history.report import trend_report

    path = tmp_path / "h" / "history.sqlite"
    settings = HistorySettings(str(path), 10, ("speed_vs_",), 3.0, 0.03, PANELS)
    store.record(db, run("r0", "2026-01-01T00:00:00Z", 0.90, gpu="H200"), "x")  # another GPU: not drawn
    for i, ratio in enumerate((0.97, 0.971, 0.873)):  # the newest run: a planted 10 % drop
        store.record(db, run(f"r{i + 1}", f"2026-01-0{i + 2}T00:00:00Z", ratio, commit=f"{i + 1}" * 40), "x")
    rep = trend_report(path, settings, "r3", "H100")
    assert rep.runs == ["1111111", "2222222", "3333333"] and not rep.note
    panels = {p.title: p.lines for p in rep.panels}
    assert panels["FlashCore speed / FA3's (paired)"] == {"perf-fa3 · prefill-d128": [0.97, 0.971, 0.873]}
    assert panels["Gate wall time (s)"] == {"perf-fa3": [9.0, 9.0, 9.0]}
    assert "FlashCore speed / cuDNN's (paired)" not in panels  # nothing measured: no empty panel
    assert [s for s, _ in rep.flags] == ["perf-fa3 · prefill-d128 speed_vs_fa3"]
    assert trend_report(path, settings, "r2", "H100").flags == []  # flags are the newest run's only
    one = trend_report(path, settings, "r0", "H200")
    assert one.panels == [] and "a trend needs two" in one.note
    (tmp_path / "dir.sqlite").mkdir()
    assert "history unreadable" in trend_report(tmp_path / "dir.sqlite", settings, "r3", "H100").note


def test_the_report_shows_the_trend_plots_and_the_flags(db: sqlite3.Connection, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.bench import plots
    from harness.history.report import trend_report
    from harness.render import render_html
    from harness.results import RunResult

    path = tmp_path / "h" / "history.sqlite"
    settings = HistorySettings(str(path), 10, ("speed_vs_",), 3.0, 0.03, PANELS)
    for i, ratio in enumerate((0.97, 0.873)):
        store.record(db, run(f"r{i}", f"2026-01-0{i + 1}T00:00:00Z", ratio, commit=f"{i + 1}" * 40), "x")
    result = RunResult("r1", 4, (), {"gpu": "H100"}, "2026-01-02T00:00:00Z", 10.0)
    html = render_html(result, trend_report(path, settings, "r1", "H100"))
    assert 'id="trends"' in html and "<svg" in html and "CHANGED</span> perf-fa3 · prefill-d128" in html
    assert 'id="trends"' not in render_html(result)  # no history (--no-history): no section

    def no_matplotlib(width: float, height: float) -> None:
        raise plots.PlotUnavailable("matplotlib cannot be imported (test): tables only")

    monkeypatch.setattr(plots, "_figure", no_matplotlib)
    html = render_html(result, trend_report(path, settings, "r1", "H100"))
    assert "matplotlib cannot be imported" in html and "CHANGED</span>" in html


@pytest.mark.parametrize("plots_yaml, key", [
    ("plots: [{title: t}]", "plots[0]"),
    ("plots: [{title: t, metrics: [elapsed_s, speed_vs_]}]", "plots[0].metrics"),
    ("plots: {}", "plots"),
])  # fmt: skip
def test_a_bad_plot_panel_is_named(gates_dir: Path, plots_yaml: str, key: str) -> None:
    path = gates_dir / "history.yaml"
    text = path.read_text()
    path.write_text(text[:text.index("plots:")] + plots_yaml + "\n")
    with pytest.raises(ConfigError, match=re.escape(key)):
        load_history_settings(gates_dir)


def test_a_broken_compressed_run_is_refused(tmp_path: Path) -> None:
    """A .json.xz that is not xz data is a HistoryError naming the file, as a broken .json is."""
    bad = tmp_path / "run.json.xz"
    bad.write_bytes(b"not xz at all")
    db = store.open_db(tmp_path / "h.sqlite")
    with pytest.raises(store.HistoryError, match="run.json.xz: not xz data"):
        store.import_file(db, bad)


@pytest.mark.parametrize("edit, says", [
    (lambda g: g.update(status="pass") or g["checks"][1].update(status="fail"), "stored pass, its 3 checks give fail"),
    (lambda g: g.update(status="pass", checks=[]), "stored pass, its no checks: error"),
    (lambda g: g["checks"][1].update(measured=0.5), "speed_vs_fa3: stored pass, but 0.5 >= 0.85 does not hold"),
])  # fmt: skip
def test_an_import_whose_statuses_its_checks_contradict_is_refused(tmp_path: Path, edit: Any, says: str) -> None:
    """History import reads a stored run as render and merge do: a gate stored pass over a failing check, a pass
    without checks or a check's pass outside its threshold is refused naming the file and the gate, and nothing
    is recorded."""
    import json

    data = run("r1", "2026-01-01T00:00:00Z", 0.97)
    edit(data["gates"][0])
    f = tmp_path / "edited.json"
    f.write_text(json.dumps(data))
    db = store.open_db(tmp_path / "h.sqlite")
    with pytest.raises(store.HistoryError, match=re.escape("edited.json")) as e:
        store.import_file(db, f)
    assert "gate perf-fa3" in str(e.value) and says in str(e.value)
    assert store.runs(db, 10) == []
