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
    out = [str(a) for a in args] + (["--causal"] if wl.causal else []) + serving_args(wl)
    return out + (["--fault", str(fault)] if fault else []) + list(extra)


def serving_args(wl: Workload) -> list[str]:
    """The driver's flags for the serving fields of `wl` (none for a plain dense workload). q_scale changes values
    only, which the tools that run the driver do not judge: it has no flag."""
    out = [] if wl.dense else ["--layout", wl.layout]
    if wl.seqlens_q:
        out += ["--seqlens-q", ",".join(map(str, wl.seqlens_q))]
    if wl.seqlens_k:
        out += ["--seqlens-k", ",".join(map(str, wl.seqlens_k))]
    if wl.page_size:
        out += ["--page-size", str(wl.page_size)]
    if wl.window != (-1, -1):
        out += ["--window", f"{wl.window_left},{wl.window_right}"]
    if wl.softcap:
        out += ["--softcap", repr(wl.softcap)]
    if wl.head_dim_v:
        out += ["--head-dim-v", str(wl.head_dim_v)]
    return out
