"""Nsight Compute (ncu) support for the ncu gates (harness/gates/ncu.py, harness/gates/ncu_stalls.py).

parse: the raw-page CSV -> launches and kernels (pure). diagnose: ncu's error lines and their fixes (pure).
stalls: the warp-stall table and the stored baseline. runner: profile the driver for one workload.
shared: one profile per workload and settings for the ncu gates of a run, judged by each.
cli: `python -m harness parse ncu FILE`.
"""
