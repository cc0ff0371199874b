"""The import graph: the schema (types, param, strict parsing) imports no gate; the gates and everything they reach
import the schema, never the loader (harness/config.py imports the gate registry), so no cycle exists."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _loaded_after(module: str) -> set[str]:
    code = f"import sys, {module}; print(' '.join(m for m in sys.modules if m.startswith('harness')))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_the_schema_imports_no_gate_and_the_gates_not_the_loader() -> None:
    assert not any(m.startswith("harness.gates") for m in _loaded_after("harness.schema"))
    assert "harness.config" not in _loaded_after("harness.gates")


def test_no_module_under_harness_gates_imports_the_loader() -> None:
    offenders = [p.name for p in (REPO / "harness/gates").glob("*.py") if "from harness.config import" in p.read_text()
                 or "import harness.config" in p.read_text()]
    assert offenders == []
