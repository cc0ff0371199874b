"""Without nvcc, `make test` skips the kernel-build tests and says why; FLASHCORE_REQUIRE_NVCC=1 makes that an error."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _pytest_without_nvcc(**env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("NVCC", "FLASHCORE_REQUIRE_NVCC")}
    clean["PATH"] = os.pathsep.join(p for p in clean.get("PATH", "").split(os.pathsep)
                                    if not (Path(p) / "nvcc").exists())
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                           "tests/test_kernel_build.py"], cwd=REPO, env={**clean, **env}, capture_output=True,
                          text=True, timeout=300)


def test_without_nvcc_the_build_tests_are_skipped_with_the_reason() -> None:
    proc = _pytest_without_nvcc()
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert "2 skipped" in proc.stdout and "needs nvcc (the CUDA compiler" in proc.stdout


def test_require_nvcc_turns_the_skip_into_an_error() -> None:
    proc = _pytest_without_nvcc(FLASHCORE_REQUIRE_NVCC="1")
    said = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "FLASHCORE_REQUIRE_NVCC=1 but nvcc is missing and 2 tests need it" in said
