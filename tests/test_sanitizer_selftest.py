"""`make selftest` cases for the sanitizer: each tool must FAIL on its planted bug and PASS the clean mode (its
control), through the gate's runner with the project's reviewed suppressions; the runner replays real planted logs
through a stand-in compute-sanitizer here (the GPU run is `make selftest`)."""

from __future__ import annotations

import stat
from pathlib import Path
from types import MappingProxyType

import pytest
from test_sanitizer_gate import install_fake, params
from test_sanitizer_parser import FIXTURES

from harness.results import Status
from harness.sanitizer.model import TOOLS
from harness.schema import Config, GateSpec, PhaseSpec
from harness.selftest import declared_cases, judge, run_case
from harness.selftest_runs import planted_sanitizer
from harness.selftest_settings import load_selftest_settings

REPO = Path(__file__).resolve().parent.parent
BUGS = {"memcheck": ("oob", "leak"), "racecheck": ("race",), "synccheck": ("divergent", "mbar"),
        "initcheck": ("uninit",)}
RC = {"clean": 0, "barcount": 3}  # the planted program's exit code by mode; a caught bug: --error-exitcode 86

# Stand-in compute-sanitizer that replays the planted program's real log for the tool and the mode it was given
# (the last argument), as the GPU would produce it.
FAKE_MODES = """#!/bin/sh
case "$1" in
  --version) echo "Version 2025.3.1.0 (fake)"; exit 0;;
  --help) echo "  --check-bulk-copy arg (=yes)"; echo "  --check-warpgroup-mma arg (=yes)"; exit 0;;
esac
tool=""; prev=""; mode=""
for a in "$@"; do [ "$prev" = "--tool" ] && tool=$a; prev=$a; mode=$a; done
cat "$FAKE_DIR/$tool-$mode.log"
exit "$(cat "$FAKE_DIR/$tool-$mode.rc")"
"""


def config() -> Config:
    phase = PhaseSpec(1, "skeleton", (GateSpec("sanitizer", 1, params()),))
    return Config(Path("gates"), MappingProxyType({}), MappingProxyType({}), (phase,))


@pytest.fixture
def planted_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = install_fake(tmp_path, monkeypatch)
    (root / "bin" / "compute-sanitizer").write_text(FAKE_MODES)
    (root / "bin" / "compute-sanitizer").chmod(0o755 | stat.S_IEXEC)
    for tool in TOOLS:
        for mode in ("clean", *BUGS.get(tool, ())):
            (root / "fake" / f"{tool}-{mode}.log").write_text((FIXTURES / f"{tool}-{mode}.log").read_text())
            (root / "fake" / f"{tool}-{mode}.rc").write_text(str(RC.get(mode, 86)))
    (root / "fake" / "synccheck-barcount.log").write_text((FIXTURES / "synccheck-barcount.log").read_text())
    (root / "fake" / "synccheck-barcount.rc").write_text("3")
    (root / "build" / "planted").write_text("#!/bin/sh\n")
    monkeypatch.chdir(root)
    return root


def cases() -> dict[str, object]:
    return {c.name: c for c in declared_cases(load_selftest_settings(REPO / "gates"))}


def test_every_tool_has_planted_bugs_and_a_clean_case() -> None:
    names = cases()
    for tool, modes in BUGS.items():
        assert all(names[f"{tool}-{m}"].must_fail == "sanitizer" for m in modes)  # type: ignore[attr-defined]
        assert names[f"{tool}-clean"].must_fail is None  # type: ignore[attr-defined]


@pytest.mark.parametrize(("tool", "mode"), [(t, m) for t, modes in BUGS.items() for m in modes])
def test_each_planted_bug_is_red_beside_its_clean_control(planted_root: Path, tool: str, mode: str) -> None:
    case = cases()[f"{tool}-{mode}"]
    row = run_case(case, config(), planted_root / "out")  # type: ignore[arg-type]
    assert row.ok, row.text
    assert "fault fail (red), control pass (green)" in row.text
    assert (planted_root / "out" / f"{tool}-{mode}" / f"{tool}-{mode}.log").is_file()


def test_a_blanket_suppression_hides_the_planted_write_and_the_selftest_fails(planted_root: Path) -> None:
    """The project's suppressions apply to the self-test: one without a kernel or file pattern silences the planted
    invalid write, so memcheck-oob is no longer red and its case is WRONG (it was OK without suppressions)."""
    blanket = "".join(f"  - tool: memcheck\n    kind: {kind}\n    justification: blanket, hides every report\n"
                      for kind in ("invalid global write", "cuda api error", "leak"))
    (planted_root / "gates" / "sanitizer-suppressions.yaml").write_text("suppressions:\n" + blanket)
    status = planted_sanitizer("memcheck", "oob")(config(), planted_root / "out" / "memcheck-oob", True)
    case = cases()["memcheck-oob"]
    ok, why = judge(case, status, {"sanitizer": Status.PASS})  # type: ignore[arg-type]
    assert status["sanitizer"] is not Status.FAIL and not ok, why


def test_a_crash_is_not_a_caught_bug(planted_root: Path) -> None:
    assert planted_sanitizer("synccheck", "barcount")(config(), planted_root / "o", True) == {
        "sanitizer": Status.ERROR}


def test_planted_program_missing_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_fake(tmp_path, monkeypatch)
    monkeypatch.chdir(tmp_path)
    assert planted_sanitizer("memcheck", "oob")(config(), tmp_path / "out" / "x", True) == {
        "sanitizer": Status.ERROR}
