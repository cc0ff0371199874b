"""Gates: one module per gate, each registered by name. Importing this package registers the built-ins."""

from harness.gates import api as api
from harness.gates import autotune_gain as autotune_gain
from harness.gates import autotune_table as autotune_table
from harness.gates import build as build
from harness.gates import correctness as correctness
from harness.gates import determinism as determinism
from harness.gates import determinism_gpus as determinism_gpus
from harness.gates import determinism_strict as determinism_strict
from harness.gates import integrations as integrations
from harness.gates import ncu as ncu
from harness.gates import ncu_stalls as ncu_stalls
from harness.gates import perf as perf
from harness.gates import random_shapes as random_shapes
from harness.gates import sanitizer as sanitizer
from harness.gates import sanitizer_all as sanitizer_all
from harness.gates import scaling as scaling
from harness.gates import structure as structure
from harness.gates.base import Gate, GateContext
from harness.gates.registry import get, names, register

__all__ = ["Gate", "GateContext", "api", "autotune_gain", "autotune_table", "build", "correctness", "determinism",
           "determinism_gpus", "determinism_strict",
           "get", "integrations", "names",
           "ncu", "ncu_stalls", "perf", "random_shapes", "register", "sanitizer", "sanitizer_all",
           "scaling", "structure"]
