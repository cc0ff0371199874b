"""Exceptions raised by the FlashCore Python API. Every unsupported input raises before any launch."""


class FlashCoreError(ValueError):
    """An input FlashCore does not support (shape, dtype, stride, alignment, device, scale, ...)."""


class UnsupportedDeviceError(FlashCoreError):
    """The tensors are not on an SM 9.0 (Hopper) CUDA device."""


class KernelLaunchError(RuntimeError):
    """The CUDA runtime reported an error while launching the kernel."""


class UnsupportedArgument(FlashCoreError):
    """An argument FlashCore does not support (an FA3 feature not implemented): the message names it and says why,
    and what to pass instead."""
