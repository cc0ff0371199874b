"""`make tune`: the autotuner over the kernel's run-time tile knobs (gates/tune.yaml, flashcore/tuning.py)."""
