"""ci/pyenv.sh, run on a copy of the repo with a fake interpreter that records what it is asked to do."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FAKE_PYTHON = """#!/usr/bin/env bash
echo "$*" >> "$FAKE_LOG"
case "$1 $2" in
  "-c import sys") exit 0 ;;
  -c*) exit "${FAKE_IMPORT_RC:-0}" ;;  # the gate's 'import torch, yaml, ...' probe
  "-m venv") dir="${@: -1}"; mkdir -p "$dir/bin"; cp "$0" "$dir/bin/python" ;;
esac
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "ci").mkdir()
    shutil.copy(REPO / "ci" / "pyenv.sh", tmp_path / "ci" / "pyenv.sh")
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    fake = tmp_path / "fakepy"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    return tmp_path


def pyenv(repo: Path, mode: str, **env: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    log = repo / "calls.log"
    log.unlink(missing_ok=True)
    full_env = {**os.environ, "PYTHON": str(repo / "fakepy"), "FAKE_LOG": str(log), "CHROMIUM": "/bin/sh", **env}
    proc = subprocess.run(["bash", str(repo / "ci" / "pyenv.sh"), mode], capture_output=True, text=True,
                          env=full_env, timeout=60, check=False)
    return proc, log.read_text().splitlines() if log.exists() else []


def test_unknown_mode_fails_loudly(repo: Path) -> None:
    proc, _ = pyenv(repo, "bogus")
    assert proc.returncode == 1 and proc.stdout == ""
    assert "usage: ci/pyenv.sh gate|test" in proc.stderr


def test_gate_uses_a_prepared_python_as_is(repo: Path) -> None:
    proc, calls = pyenv(repo, "gate")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"{repo / 'fakepy'}\n"
    assert calls == ["-c import torch, yaml, jinja2, pytest, pytest_benchmark"]
    assert not (repo / ".venv-gate").exists()


def test_gate_builds_a_venv_when_deps_are_missing(repo: Path) -> None:
    proc, calls = pyenv(repo, "gate", FAKE_IMPORT_RC="1")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"{repo / '.venv-gate' / 'bin' / 'python'}\n"
    assert f"-m venv --clear {repo / '.venv-gate'}" in calls
    assert calls[-1] == "-m pip install --quiet -e .[harness]"


def test_test_mode_installs_cpu_torch_first_then_reuses(repo: Path) -> None:
    venv_python = f"{repo / '.venv' / 'bin' / 'python'}\n"
    proc, calls = pyenv(repo, "test")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == venv_python
    installs = [c for c in calls if c.startswith("-m pip install")]
    assert installs == ["-m pip install --quiet torch==2.13.0", "-m pip install --quiet -e .[test]"]

    proc, calls = pyenv(repo, "test")  # same pyproject.toml: no install at all
    assert proc.stdout == venv_python and "reusing .venv" in proc.stderr
    assert not [c for c in calls if "pip" in c]

    with (repo / "pyproject.toml").open("a") as f:
        f.write("\n# changed\n")
    proc, calls = pyenv(repo, "test")
    assert proc.stdout == venv_python
    assert [c for c in calls if c.startswith("-m pip install")] == installs


def test_failed_install_is_reported_and_not_stamped(repo: Path) -> None:
    (repo / "fakepy").write_text(FAKE_PYTHON.replace('cp "$0" "$dir/bin/python" ;;',
                                                     'cp "$0" "$dir/bin/python" ;;\n  "-m pip") exit 3 ;;'))
    proc, _ = pyenv(repo, "test")
    assert proc.returncode == 1 and proc.stdout == ""
    assert "ERROR: pip install" in proc.stderr
    assert not (repo / ".venv" / ".flashcore-stamp").exists()
