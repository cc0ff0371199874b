"""The GPU probe of the GPU gates: which machines run them, and the one line shown when they do not."""

from __future__ import annotations

from harness.support.gpu import not_hopper_reason


def test_a_gpu_that_is_not_hopper_means_the_kernel_was_not_tested() -> None:
    assert not_hopper_reason((9, 0), "NVIDIA H100 80GB HBM3") is None
    line = not_hopper_reason((8, 0), "NVIDIA A100-SXM4-80GB")
    assert line is not None and "SM 8.0" in line and "kernel was not tested" in line and "this run fails" in line
