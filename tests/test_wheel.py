"""`pip install .` as a user runs it (setup.py's build hook): the package, its data and the kernel library land in
the wheel, and the installed package finds the library from any directory, or says why there is none."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _wheel(tmp: Path, **env: str) -> tuple[Path, str]:
    """Build a wheel of the checkout with the given environment (no nvcc on PATH); (wheel, build output)."""
    clean = {k: v for k, v in os.environ.items() if k not in ("NVCC", "FLASHCORE_PREBUILT", "FLASHCORE_NO_KERNEL",
                                                              "FLASHCORE_REQUIRE_KERNEL", "FLASHCORE_LIB")}
    clean["PATH"] = os.pathsep.join(p for p in clean.get("PATH", "").split(os.pathsep)
                                    if not (Path(p) / "nvcc").exists())
    res = subprocess.run([sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "--no-build-isolation", "-v",
                          "-w", str(tmp / "dist")], env={**clean, **env}, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    (wheel,) = (tmp / "dist").glob("flashcore-*.whl")
    return wheel, res.stdout + res.stderr


def _installed_probe(tmp: Path, wheel: Path) -> str:
    """Install the wheel into a fresh directory and report, from another directory, where it looks for the kernel."""
    site = tmp / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site), str(wheel)],
                   check=True, timeout=300)
    probe = ("import flashcore, flashcore._lib as L\n"
             "print(flashcore.__version__); print(flashcore.library_path())\n"
             "try:\n    L.load()\nexcept (FileNotFoundError, OSError) as e:\n    print('load:', e)\n")
    env = {k: v for k, v in os.environ.items() if k != "FLASHCORE_LIB"}
    env["PYTHONPATH"] = str(site)
    res = subprocess.run([sys.executable, "-c", probe], cwd=tmp, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_without_nvcc_the_package_installs_and_says_it_has_no_kernel(tmp_path: Path) -> None:
    wheel, log = _wheel(tmp_path)
    assert "installing without the kernel" in log
    names = zipfile.ZipFile(wheel).namelist()
    shipped = {"flashcore/py.typed", "flashcore/tuned.yaml", "flashcore/api.py", "flashcore/include/flashcore.h"}
    assert shipped <= set(names)  # the header: the head-dim table without the library
    assert not any(n.startswith("flashcore/lib/") for n in names)
    assert "-none-any" not in wheel.name  # a platform wheel: it can carry the compiled library
    out = _installed_probe(tmp_path, wheel)
    assert str(tmp_path / "site" / "flashcore" / "lib" / "libflashcore.so") in out  # never site-packages/build/
    assert "this installation has no kernel" in out and "reinstall with nvcc" in out


def test_a_built_library_ships_inside_the_package(tmp_path: Path) -> None:
    fake = tmp_path / "libflashcore.so"
    fake.write_bytes(b"\x7fELF not really")  # copied as is; the probe only asks where it is
    wheel, _ = _wheel(tmp_path, FLASHCORE_PREBUILT=str(fake))
    assert "flashcore/lib/libflashcore.so" in zipfile.ZipFile(wheel).namelist()
    out = _installed_probe(tmp_path, wheel)
    assert f"{tmp_path / 'site' / 'flashcore' / 'lib' / 'libflashcore.so'}\n" in out
    assert "this installation has no kernel" not in out  # found it (loading a fake fails with the loader's error)


def test_a_checkout_uses_its_build_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    from flashcore import _lib

    monkeypatch.delenv("FLASHCORE_LIB", raising=False)
    if _lib.PACKAGED.is_file():
        pytest.skip("this checkout has a packaged library")
    assert _lib.library_path() == REPO / "build" / "libflashcore.so"
