"""build/flashcore_driver on the serving workloads (the sanitizer and ncu gates run them through it): every layout
launches and finishes (tests marked `gpu`); an inconsistent set of flags is a usage error before any CUDA call
(no GPU needed: runs wherever the driver is built)."""

from __future__ import annotations

import pytest
from conftest import REPO
from conftest import run_driver as run

from harness.config import load_config
from harness.driver_args import driver_args

CONFIG = load_config(REPO / "gates")


@pytest.mark.gpu
@pytest.mark.parametrize("name", [*CONFIG.sets["serving"], "serve-paged-decode", "serve-varlen-prefill"])
def test_every_serving_workload_runs_on_the_driver(name: str) -> None:
    proc = run(driver_args(CONFIG.workloads[name], iters=2))
    assert proc.returncode == 0 and "RESULT status=ok" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("extra", [
    ["--layout", "varlen", "--seqlens-q", "1,2", "--seqlens-k", "1,2"],  # 2 lengths for a batch of 3
    ["--layout", "paged", "--seqlens-k", "1,2,3", "--page-size", "24"],  # does not divide the capacity (64)
    ["--layout", "kvcache", "--seqlens-k", "1,2,999"],  # longer than the cache (seqlen-k 64)
    ["--layout", "dense", "--seqlens-k", "1,2,3"],  # lengths on a dense batch
    ["--layout", "varlen", "--seqlens-q", "1,2,x", "--seqlens-k", "1,2,3"],  # not a number
    ["--window", "3", "--check"],  # no right bound; --check is dense-only anyway
])
def test_inconsistent_serving_flags_are_a_usage_error(extra: list[str]) -> None:
    base = ["--batch", "3", "--heads-q", "2", "--heads-kv", "2", "--seqlen-q", "2", "--seqlen-k", "64",
            "--head-dim", "64", "--dtype", "bf16"]
    proc = run(base + extra)
    assert proc.returncode == 2 and "RESULT status=error reason=usage" in proc.stdout, proc.stdout + proc.stderr
