"""Exceptions raised by the FlashCore Python API. Every unsupported input raises before any launch."""


class FlashCoreError(ValueError):
    """An input FlashCore does not support (shape, dtype, stride, alignment, device, scale, ...)."""


class UnsupportedDeviceError(FlashCoreError):
    """The tensors are not on an SM 9.0 (Hopper) CUDA device."""


class KernelLaunchError(RuntimeError):
    """The CUDA runtime reported an error while launching the kernel."""
