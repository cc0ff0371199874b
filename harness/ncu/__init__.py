"""ncu gate: see harness/ncu/*.py."""
