"""Nsight Compute (ncu) support for the ncu gates (harness/gates/ncu.py, harness/gates/ncu_stalls.py).

parse: the raw-page CSV -> launches and kernels (pure). diagnose: ncu's error lines and their fixes (pure).
stalls: the warp-stall table and the stored baseline. runner: profile the driver for one workload.
cli: `python -m harness parse ncu FILE`.
"""
