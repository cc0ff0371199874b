"""Gates: one module per gate, each registered by name with `@register` (harness/gates/registry.py). Importing this
package imports every module in it, so a new gate file registers itself with no list to edit; HELPERS names the
modules that hold no gate (tests/test_gates_registry.py checks that every other module registers one)."""

from harness.gates.base import Gate, GateContext
from harness.gates.registry import get, import_modules, names, register

HELPERS = ("base", "registry")
MODULES = import_modules(__name__, __path__)

__all__ = ["HELPERS", "MODULES", "Gate", "GateContext", "get", "names", "register"]
