"""Gates: one module per gate, each registered by name. Importing this package registers the built-ins."""

from harness.gates import build as build
from harness.gates import correctness as correctness
from harness.gates import determinism as determinism
from harness.gates.base import Gate, GateContext
from harness.gates.registry import get, names, register

__all__ = ["Gate", "GateContext", "build", "correctness", "determinism", "get", "names", "register"]
