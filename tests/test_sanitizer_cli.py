"""`python -m harness parse sanitizer LOG [--tool T]`: JSON with tool, verdict, errors, warnings and findings;
exit 0 whenever the file was parsed (the verdict is in the JSON), 2 when it cannot be read."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_sanitizer_parser import FIXTURES

from harness import cli

REPO = Path(__file__).resolve().parent.parent


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code = cli.main(["parse", "sanitizer", *argv])
    out = capsys.readouterr().out
    return code, json.loads(out) if out else {}


@pytest.mark.parametrize(("name", "tool", "verdict", "errors"), [
    ("racecheck-race-exit0", "racecheck", "fail", 1),
    ("memcheck-leak", "memcheck", "fail", 1),
    ("synccheck-mbar", "synccheck", "fail", 256),
    ("initcheck-uninit", "initcheck", "fail", 256),
    ("kernel-racecheck", "racecheck", "pass", 0),
    ("memcheck-clean", "memcheck", "pass", 0),
])
def test_tool_is_inferred(capsys: pytest.CaptureFixture[str], name: str, tool: str, verdict: str,
                          errors: int) -> None:
    code, out = run(capsys, str(FIXTURES / f"{name}.log"))
    assert code == 0
    assert (out["tool"], out["verdict"], out["errors"], out["warnings"]) == (tool, verdict, errors, 0)
    assert isinstance(out["findings"], list) and bool(out["findings"]) == (verdict == "fail")


def test_findings_are_structured(capsys: pytest.CaptureFixture[str]) -> None:
    _, out = run(capsys, str(FIXTURES / "memcheck-oob.log"))
    oob = out["findings"][0]
    assert {k: oob[k] for k in ("tool", "kind", "kernel", "location", "thread", "block", "size", "count",
                                "suppressed")} == {
        "tool": "memcheck", "kind": "invalid global write", "kernel": "oob_write(float *, int, int)",
        "location": "planted.cu:23", "thread": "(255,0,0)", "block": "(0,0,0)", "size": 4, "count": 1,
        "suppressed": False}


def test_uninferable_tool_is_an_error_until_given(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(FIXTURES / "synccheck-clean.log")
    code, out = run(capsys, path)
    assert code == 0 and out["verdict"] == "error" and out["tool"] is None and "--tool" in out["reason"]
    code, out = run(capsys, path, "--tool", "synccheck")
    assert code == 0 and (out["tool"], out["verdict"]) == ("synccheck", "pass")


def test_truncated_and_crashed_logs_are_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, str(FIXTURES / "memcheck-oob-truncated.log"))[1]["verdict"] == "error"
    _, out = run(capsys, str(FIXTURES / "synccheck-barcount.log"), "--tool", "synccheck")
    assert out["verdict"] == "error" and out["app_failed"] is True


def test_unreadable_file_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = cli.main(["parse", "sanitizer", str(tmp_path / "missing.log")])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == "" and "cannot read" in captured.err


def test_as_a_command() -> None:
    proc = subprocess.run([sys.executable, "-m", "harness", "parse", "sanitizer",
                           str(FIXTURES / "racecheck-race.log")], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["verdict"] == "fail"
