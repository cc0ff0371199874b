"""The Makefile, .ci/run and README.md agree on the commands a developer and CI run."""

from __future__ import annotations

import os
import subprocess
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def make_dry_run(*targets: str) -> str:
    proc = subprocess.run(["make", "-n", *targets], cwd=REPO, capture_output=True, text=True, timeout=60,
                          check=True)
    return proc.stdout


def test_default_target_is_help() -> None:
    out = subprocess.run(["make"], cwd=REPO, capture_output=True, text=True, timeout=60, check=True).stdout
    assert "make gate-phaseN" in out and "make test" in out


@pytest.mark.parametrize("phase", range(1, 8))
def test_gate_targets_run_the_harness_for_their_phase(phase: int) -> None:
    out = make_dry_run(f"gate-phase{phase}")
    assert "ci/pyenv.sh gate" in out and f"-m harness gate --phase {phase}" in out


def test_test_target_lints_types_and_deselects_gpu_tests() -> None:
    out = make_dry_run("test")
    assert "ci/pyenv.sh test" in out
    for step in ("-m ruff check", "-m mypy harness", '-m pytest -m "not gpu"'):
        assert step in out
    assert out.index("-m ruff") < out.index("-m mypy") < out.index("-m pytest")


def test_ci_runs_the_readme_test_command() -> None:
    run = REPO / ".ci" / "run"
    assert os.access(run, os.X_OK)
    lines = [line for line in run.read_text().splitlines() if line and not line.startswith("#")]
    assert lines[0] == "set -euo pipefail" and lines[-1] == "make test"
    readme = (REPO / "README.md").read_text()
    phase = (REPO / "ci" / "gate-phase").read_text().strip()
    assert "`make test`" in readme and f"`make gate-phase{phase}`" in readme  # the phase CI gates


def test_pyproject_ships_the_report_template() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    globs = config["tool"]["setuptools"]["package-data"]["harness.render"]
    templates = list((REPO / "harness" / "render").glob(globs[0]))
    assert [t.name for t in templates] == ["report.html.j2"]
    assert [m.split(":")[0] for m in config["tool"]["pytest"]["ini_options"]["markers"]] == ["gpu", "nvcc"]
