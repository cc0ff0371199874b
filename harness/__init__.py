"""FlashCore validation harness: phase-gated CI checks of the kernel (`python -m harness gate --phase N`)."""

__version__ = "0.1.0"
