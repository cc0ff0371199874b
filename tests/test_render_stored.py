"""`python -m harness render RESULTS.json --out DIR`: a stored run read back and its report written again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.render.json_out import FULL_FILE, RESULTS_MAX_BYTES
from harness.render.stored import StoredRunError, read_run, run_from_dict

REPO = Path(__file__).resolve().parent.parent
EVIDENCE = REPO / "reports" / "evidence" / "phase7.json"


def test_a_stored_run_reads_back_to_the_same_json() -> None:
    data = json.loads(EVIDENCE.read_text())
    run = read_run(EVIDENCE)
    assert run.to_dict() == data
    assert run.status.value == data["status"] and len(run.gates) == len(data["gates"])


def test_render_writes_the_report_of_the_committed_evidence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", str(EVIDENCE), "--out", str(tmp_path / "report")]) == 0
    out = tmp_path / "report"
    assert {"index.html", "summary.md", "results.json", FULL_FILE} <= {p.name for p in out.iterdir()}
    assert read_run(out / "results.json").to_dict() == json.loads(EVIDENCE.read_text())  # through the sidecar
    assert (out / "results.json").stat().st_size <= RESULTS_MAX_BYTES < EVIDENCE.stat().st_size
    html = (out / "index.html").read_text()
    assert json.loads(EVIDENCE.read_text())["run_id"] in html and "scaling" in html
    assert f"{len(json.loads(EVIDENCE.read_text())['gates'])} gates" in capsys.readouterr().out


@pytest.mark.parametrize(("content", "says"), [
    ("not json", "not JSON"),
    ('{"schema": "flashcore.bench-run/1"}', "expected 'flashcore.run/1'"),
    ('{"schema": "flashcore.run/1", "run_id": "r", "phase": 1, "gates": [{"name": "build"}]}',
     "gates[0]: missing key 'checks'"),
    ('{"schema": "flashcore.run/1", "run_id": "r", "phase": 1, "gates": [{"name": "build", "phase": 1, '
     '"status": "passed", "checks": []}]}', "status 'passed' is not one of"),
])
def test_an_unusable_file_is_refused_with_where_and_why(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        content: str, says: str) -> None:
    f = tmp_path / "results.json"
    f.write_text(content)
    assert main(["render", str(f), "--out", str(tmp_path / "out")]) == 2
    assert says in capsys.readouterr().err and not (tmp_path / "out").exists()


def test_a_status_that_its_gates_contradict_is_refused(tmp_path: Path) -> None:
    data = json.loads(EVIDENCE.read_text())
    data["gates"][0]["checks"][0]["status"] = data["gates"][0]["status"] = "fail"  # the run still says pass
    f = tmp_path / "results.json"
    f.write_text(json.dumps(data))
    with pytest.raises(StoredRunError, match="edited or is damaged"):
        read_run(f)
    assert run_from_dict(data).status.value == "fail"  # the verdict comes from the gates, never from the field


def test_a_missing_file_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", str(tmp_path / "nope.json"), "--out", str(tmp_path / "out")]) == 2
    assert "cannot be read" in capsys.readouterr().err


def test_an_xz_compressed_run_reads_and_renders_as_the_plain_one(tmp_path: Path) -> None:
    """reports/evidence/ keeps large runs as .json.xz: read_run (render, merge) reads them as is; bytes that are not
    xz data are refused with the file's name."""
    import lzma

    packed = tmp_path / "run.json.xz"
    packed.write_bytes(lzma.compress(EVIDENCE.read_bytes()))
    assert read_run(packed).to_dict() == read_run(EVIDENCE).to_dict()
    assert main(["render", str(packed), "--out", str(tmp_path / "report")]) == 0
    assert read_run(tmp_path / "report" / "results.json").to_dict() == json.loads(EVIDENCE.read_text())
    bad = tmp_path / "bad.json.xz"
    bad.write_bytes(b"plain text")
    with pytest.raises(StoredRunError, match="bad.json.xz: not xz data"):
        read_run(bad)
