"""Benchmarking: GPU timing, FLOP counting, baselines (torch SDPA backends, FA3), records and plots.

Shared by the pytest-benchmark suite (`bench/`, `make bench`) and the perf and scaling gates, so both
measure with the same code and write the same record (`record.Measurement`). Only `timing`, `clocks`, `backends`
and `runner` need torch and a GPU; everything else is pure and tested on the CPU (`extend` decides which workloads
get more rounds after the base ones; `replay` applies that rule offline to a run timed with a fixed budget).
"""
