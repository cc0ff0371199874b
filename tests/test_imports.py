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


def test_harness_gates_holds_gates_only_and_the_rest_never_imports_it() -> None:
    """Each module of harness/gates/ but the package's machinery registers a gate; the benchmark, the tuner's GPU
    helpers and the support modules do not reach up into the gates package (harness/support/ holds the shared
    helpers: torch inputs, ptxas/disassembly parsing, references, verdict arithmetic)."""
    machinery = {"__init__", "base", "registry"}
    modules = {p.stem for p in (REPO / "harness/gates").glob("*.py")} - machinery
    code = ("import harness.gates, harness.gates.registry as r; "
            "print(' '.join(sorted({type(r.get(n)).__module__ if not isinstance(r.get(n), type) else "
            "r.get(n).__module__ for n in r.names()})))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    registering = {m.rsplit(".", 1)[-1] for m in out.stdout.split()}
    assert modules <= registering, f"not a gate: {sorted(modules - registering)}"
    for pkg in ("harness/support", "harness/bench"):
        upward = [p.name for p in (REPO / pkg).glob("*.py") if "from harness.gates" in p.read_text()]
        assert upward == [], f"{pkg} imports the gates package: {upward}"
