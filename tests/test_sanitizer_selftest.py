"""`make selftest` cases for the sanitizer: each tool must FAIL on its planted bug and PASS the clean mode; the
runner replays real planted logs through a stand-in compute-sanitizer here (the GPU run is `make selftest`)."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType

import pytest
from test_sanitizer_gate import install_fake, params, replay

from harness.results import Status
from harness.sanitizer.model import TOOLS
from harness.schema import Config, GateSpec, PhaseSpec
from harness.selftest import CASES, _planted_sanitizer, judge

BUGS = {"memcheck": ("oob", "leak"), "racecheck": ("race",), "synccheck": ("divergent", "mbar"),
        "initcheck": ("uninit",)}


def config() -> Config:
    phase = PhaseSpec(1, "skeleton", (GateSpec("sanitizer", 1, params()),))
    return Config(Path("gates"), MappingProxyType({}), MappingProxyType({}), (phase,))


def test_every_tool_has_planted_bugs_and_a_clean_case() -> None:
    names = {c.name: c for c in CASES}
    for tool, modes in BUGS.items():
        assert all(names[f"{tool}-{m}"].must_fail == "sanitizer" for m in modes)
        assert names[f"{tool}-clean"].must_fail is None


@pytest.mark.parametrize(("tool", "mode", "fixture", "rc", "expected"), [
    ("memcheck", "oob", "memcheck-oob", 86, Status.FAIL),
    ("memcheck", "leak", "memcheck-leak", 86, Status.FAIL),
    ("racecheck", "race", "racecheck-race", 86, Status.FAIL),
    ("synccheck", "divergent", "synccheck-divergent", 86, Status.FAIL),
    ("synccheck", "mbar", "synccheck-mbar", 86, Status.FAIL),
    ("initcheck", "uninit", "initcheck-uninit", 86, Status.FAIL),
    *((t, "clean", f"{t}-clean", 0, Status.PASS) for t in TOOLS),
    ("synccheck", "barcount", "synccheck-barcount", 3, Status.ERROR),  # a crash is not a caught bug
])
def test_planted_runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tool: str, mode: str, fixture: str,
                        rc: int, expected: Status) -> None:
    root = install_fake(tmp_path, monkeypatch)
    replay(root, tool, fixture, rc)
    (root / "build" / "planted").write_text("#!/bin/sh\n")
    monkeypatch.chdir(root)
    statuses = _planted_sanitizer(tool, mode)(config(), tmp_path / "out")
    assert statuses == {"sanitizer": expected}
    assert (tmp_path / "out" / f"{tool}-{mode}.log").read_text() == (root / "fake" / f"{tool}.log").read_text()
    argv = (root / "fake" / "argv").read_text()
    assert f"{root / 'build' / 'planted'} {mode}" in argv and "--error-exitcode 86" in argv
    case = next((c for c in CASES if c.name == f"{tool}-{mode}"), None)
    if case is not None:
        assert judge(case, statuses)[0]


def test_planted_program_missing_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_fake(tmp_path, monkeypatch)
    monkeypatch.chdir(tmp_path)
    assert _planted_sanitizer("memcheck", "oob")(config(), tmp_path / "out") == {"sanitizer": Status.ERROR}
