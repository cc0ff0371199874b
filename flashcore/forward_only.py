"""FA3's entry points with inputs that require grad under grad mode: the forward runs (without recording a graph) and
its output carries a backward that raises FlashCoreError, as fa3-fwd's (forward-only FA3) does. FA3's callers make
forward calls with such inputs (its own tests do, and so does evaluation code that leaves grad mode on); refusing the
forward broke them, and detaching silently would let a training step run on no gradient. The backward raising keeps
that impossible: a loss through the output cannot be backpropagated. flashcore.attention keeps refusing such inputs
at the call (flashcore/validate.py no_grad_needed). torch.compile(fullgraph=True) of such a call breaks the graph
(the autograd Function holds a closure): compile it under torch.no_grad() or inference_mode(), as inference does.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from flashcore.errors import FlashCoreError

F = TypeVar("F", bound=Callable[..., Any])

MESSAGE = ("FlashCore is forward-only (no backward kernel): the attention output cannot be backpropagated. Run the "
           "forward under torch.no_grad() or torch.inference_mode() where no gradient is wanted")


def _needing_grad(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    import torch

    if not torch.is_grad_enabled():
        return ()
    return tuple(a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor) and a.requires_grad)


@functools.cache
def _no_backward() -> type:
    """Built on first use and kept (torch is imported only when a call needs grad)."""
    import torch

    class NoBackward(torch.autograd.Function):
        """The call's outputs (computed here, grad mode off), the first with a backward that raises; the inputs
        that need grad are the other arguments, so that the outputs hang on them."""

        @staticmethod
        def forward(ctx: Any, call: Callable[[], Any], *inputs: torch.Tensor) -> Any:
            result = call()
            if isinstance(result, tuple):
                ctx.mark_non_differentiable(*(t for t in result[1:] if isinstance(t, torch.Tensor)))
            return result

        @staticmethod
        def backward(ctx: Any, *grads: Any) -> Any:
            raise FlashCoreError(MESSAGE)

    return NoBackward


def entry(fn: F) -> F:
    """An FA3 entry point (returning out, or a tuple whose first item is out) as fa3-fwd runs it under grad."""
    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        needing = _needing_grad(args, kwargs)
        if not needing:
            return fn(*args, **kwargs)
        if kwargs.get("out") is not None:  # the caller's buffer cannot take the raising backward's place in a graph
            raise FlashCoreError(f"{MESSAGE}; an out buffer with inputs that require grad is refused")
        return _no_backward().apply(lambda: fn(*args, **kwargs), *needing)  # type: ignore[attr-defined]

    return run  # type: ignore[return-value]
