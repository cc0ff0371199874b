"""build/flashcore_driver's command-line flags for a workload (kernel/driver.cu): one builder for every tool that
runs the driver (the sanitizer gates, the Nsight Compute gates)."""

from __future__ import annotations

from collections.abc import Sequence

from harness.schema import Workload


def driver_args(wl: Workload, iters: int = 1, seed: int | None = None, fault: int = 0,
                extra: Sequence[str] = ()) -> list[str]:
    """The shape and dtype of `wl`, `iters` launches, the input seed (driver default when None), the test-only
    planted kernel fault (0: none), then `extra` flags. No reference check (--check) unless `extra` asks."""
    args = ["--batch", wl.batch, "--heads-q", wl.heads_q, "--heads-kv", wl.heads_kv, "--seqlen-q", wl.seqlen_q,
            "--seqlen-k", wl.seqlen_k, "--head-dim", wl.head_dim, "--dtype", wl.dtype, "--iters", iters]
    if seed is not None:
        args += ["--seed", seed]
    out = [str(a) for a in args] + (["--causal"] if wl.causal else [])
    return out + (["--fault", str(fault)] if fault else []) + list(extra)
