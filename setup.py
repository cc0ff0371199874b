"""Build hook (setuptools): `pip install .` compiles the kernel with the Makefile (`make build`) when nvcc is
available and ships build/libflashcore.so inside the package (flashcore/lib/), so `import flashcore` finds it from
any directory. Without nvcc the package installs without the kernel and says so: flashcore.attention then raises
a clear error on the GPU path, and fallback="sdpa" works.
Environment: FLASHCORE_NO_KERNEL=1 skips the build; FLASHCORE_REQUIRE_KERNEL=1 makes a missing nvcc an error;
FLASHCORE_PREBUILT=path ships a library built beforehand. Editable installs (pip install -e .) skip the hook: they
use the checkout's build/ (make build).
Why the Makefile rather than scikit-build-core/CMake: the Makefile is the one build the gates check (flags, ptxas
report, kernel id); a second build description would drift from it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class BuildWithKernel(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        # The head-dim table (FC_HEAD_DIM_TABLE) is read from the C header when the library is not loaded
        # (flashcore/head_dims.py), so the package carries it, with or without the kernel.
        include = Path(self.build_lib) / "flashcore" / "include"
        include.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / "kernel" / "flashcore.h", include / "flashcore.h")
        lib = self._build_kernel()
        dest = Path(self.build_lib) / "flashcore" / "lib" / "libflashcore.so"
        if lib is None:
            dest.unlink(missing_ok=True)  # an earlier build's library in setuptools' reused build dir: never ship it
            return
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(lib, dest)

    def _build_kernel(self) -> Path | None:
        prebuilt = os.environ.get("FLASHCORE_PREBUILT")
        if prebuilt:  # a library built beforehand (make build; or a packager's own build machine)
            if not Path(prebuilt).is_file():
                raise SystemExit(f"flashcore: FLASHCORE_PREBUILT={prebuilt} is not a file")
            return Path(prebuilt)
        if os.environ.get("FLASHCORE_NO_KERNEL") == "1":
            print("flashcore: FLASHCORE_NO_KERNEL=1: installing without the kernel")
            return None
        nvcc = os.environ.get("NVCC") or shutil.which("nvcc")
        if not nvcc:
            if os.environ.get("FLASHCORE_REQUIRE_KERNEL") == "1":
                raise SystemExit("flashcore: FLASHCORE_REQUIRE_KERNEL=1 but no nvcc on PATH (or $NVCC)")
            print("flashcore: WARNING: no nvcc on PATH (or $NVCC): installing without the kernel; "
                  "flashcore.attention needs it on the GPU (fallback='sdpa' works without it)")
            return None
        subprocess.run(["make", "-s", "build", f"NVCC={nvcc}"], cwd=ROOT, check=True)
        return ROOT / "build" / "libflashcore.so"


class PlatformDistribution(Distribution):
    """The wheel carries a compiled library: tag it for this platform, not py3-none-any."""

    def has_ext_modules(self) -> bool:
        return True


setup(cmdclass={"build_py": BuildWithKernel}, distclass=PlatformDistribution)
