"""compute-sanitizer for real: the planted program builds here (nvcc, no GPU); on the H100 each tool FAILs on its
planted bug, PASSes the clean mode, and the gate passes the real kernel (tests marked `gpu`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from harness.env import find_cuda_tool
from harness.results import Status
from harness.sanitizer import runner

REPO = Path(__file__).resolve().parent.parent


def build_planted(build_dir: Path) -> Path:
    proc = subprocess.run(["make", "-s", "-f", "kernel/kernel.mk", f"BUILD_DIR={build_dir}", f"{build_dir}/planted"],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return build_dir / "planted"


@pytest.mark.nvcc
def test_planted_program_builds(tmp_path: Path) -> None:
    assert build_planted(tmp_path).is_file()


@pytest.mark.gpu
@pytest.mark.parametrize(("tool", "mode", "expected", "kind"), [
    ("memcheck", "oob", Status.FAIL, "invalid global write"),
    ("memcheck", "leak", Status.FAIL, "leak"),
    ("racecheck", "race", Status.FAIL, "shared-memory race"),
    ("synccheck", "divergent", Status.FAIL, "divergent barrier"),
    ("synccheck", "mbar", Status.FAIL, "missing mbarrier init"),
    ("synccheck", "barcount", Status.ERROR, None),
    ("initcheck", "uninit", Status.FAIL, "uninitialized global read"),
    *((t, "clean", Status.PASS, None) for t in ("memcheck", "racecheck", "synccheck", "initcheck")),
])
def test_planted_bugs_on_the_gpu(tmp_path: Path, tool: str, mode: str, expected: Status, kind: str | None) -> None:
    sanitizer = find_cuda_tool("compute-sanitizer")
    assert sanitizer is not None, "compute-sanitizer not found"
    planted = build_planted(tmp_path / "build")
    opts = runner.Options(timeout_s=300, padding=32, hopper=runner.probe(sanitizer)[1])
    o = runner.check(sanitizer, tool, [str(planted), mode], tmp_path / "log", opts, completion=f"planted {mode}: done")
    assert o.judgement.status is expected, o.judgement.reason + "\n" + (tmp_path / "log").read_text()[-2000:]
    if kind is not None:
        assert o.log.findings[0].kind == kind and o.log.findings[0].location is not None
