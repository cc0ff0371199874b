# FlashCore: `make help` lists the targets. Variables may be overridden: make test PYTHON=python3.11
PYTHON    ?= python3
NVCC      ?= nvcc
BUILD_DIR ?= build
GATE_ARGS ?=
# The GPUs a phase's gates spread over (gates/shard.yaml: workers per GPU, the perf group measured alone): every
# visible one by default; GPUS= runs them one after another in one process. A CI runner's --shard and --only pick the
# gates themselves, so with them the default placement steps aside (GPUS given on the command line never does).
GPUS ?= all
PYTEST_ARGS ?=
BENCH_ARGS ?=
TUNE_ARGS ?=
export PYTHON NVCC

.DEFAULT_GOAL := help
PHASES := 1 2 3 4 5 6 7
# mypy gets flashcore/ only once it holds Python files.
TYPED := harness $(if $(wildcard flashcore/*.py),flashcore)

include kernel/kernel.mk

.PHONY: help test selftest bench bench-baseline prepare tune tune-build fa3-tests clean distclean $(addprefix gate-phase,$(PHASES))

help:
	@echo "make build          build $(BUILD_DIR)/libflashcore.so, flashcore_driver, ptxas.log (needs nvcc)"
	@echo "make ptx | sass     dump the kernel's PTX / SASS (kernel/kernel.mk)"
	@echo "make gate-phaseN    run the gates of phases 1..N (N = 1..7) on a Hopper GPU; report under reports/<run-id>/"
	@echo "                    over every GPU, workers per GPU (gates/shard.yaml); GPUS=0,1 picks, GPUS= one process"
	@echo "make selftest       GPU: plant one fault per gate: each gate fails, its clean control passes (SHARE=I/N)"
	@echo "make bench          GPU: the benchmark suite (bench/, gates/bench.yaml) with live progress and a table"
	@echo "make bench-baseline GPU: the suite, then store FlashCore's times as the perf gates' regression reference"
	@echo "                    (this GPU's file: gates/baselines/bench-<gpu>.json, a new one for a new GPU)"
	@echo "make prepare        GPU, once per new GPU model: make tune, then make bench-baseline; commit what they write"
	@echo "make tune           GPU: time the kernel's tile configurations per shape bucket, write flashcore/tuned.yaml"
	@echo "make tune-build     no GPU: build make tune's compile-time points into build/tune/ (make tune reuses them)"
	@echo "make test           CPU suite: set up .venv, ruff, mypy, pytest (GPU tests deselected and counted)"
	@echo "make clean          remove $(BUILD_DIR)/ and tool caches; 'make distclean' also removes the venvs"
	@echo "make planted        build the planted-bug binary the sanitizer selftest runs (tests/planted/)"
	@echo "make kernel-id      print the hash of the kernel sources (fc_kernel_id; the tuned table is keyed by it)"
	@echo "make fa3-tests      GPU: FA3's own forward tests on FlashCore (FA3_HOPPER=<flash-attention>/hopper FA3_ARGS=...)"
	@echo "variables: PYTHON=$(PYTHON) NVCC=$(NVCC) BUILD_DIR=$(BUILD_DIR) GATE_ARGS='$(GATE_ARGS)' GPUS=$(GPUS) PYTEST_ARGS='$(PYTEST_ARGS)'"
	@echo "           BENCH_ARGS='$(BENCH_ARGS)' TUNE_ARGS='$(TUNE_ARGS)' NVCC_EXTRA='$(NVCC_EXTRA)' POINTS_FILE=$(POINTS_FILE) (kernel/kernel.mk)"

# The build gate runs the build itself, so a failing build still yields a report.
GATE_PICKS = $(findstring --shard,$(GATE_ARGS))$(findstring --only,$(GATE_ARGS))
GATE_GPUS = $(if $(GPUS),$(if $(and $(GATE_PICKS),$(filter file default,$(origin GPUS))),,--gpus $(GPUS)))
$(addprefix gate-phase,$(PHASES)): gate-phase%:
	@PY=$$(ci/pyenv.sh gate) && $$PY -m harness gate --phase $* $(GATE_GPUS) $(GATE_ARGS)

# GPU host: plant one fault per gate (kernel faults, a spilling build, planted sanitizer bugs, a hung kernel); each
# must turn its gate red while a clean control of the same gate stays green (gates/selftest.yaml: trims, parallelism).
# SHARE=I/N runs the I-th of the N shares gates/selftest.yaml names (together every case once; each fits one
# 10-minute device call), printing its cases first and its summary last.
selftest:
	@PY=$$(ci/pyenv.sh gate) && $(MAKE) -s build planted && $$PY -m harness selftest $(if $(SHARE),--share $(SHARE))

# GPU host: FlashCore and the baselines timed by pytest-benchmark; JSON and table under reports/bench-<time>/.
# BENCH_ARGS passes options, e.g. BENCH_ARGS='--workloads prefill-d128 --backends flashcore,fa2'.
bench:
	@PY=$$(ci/pyenv.sh gate) && $(MAKE) -s build && $$PY -m harness bench $(BENCH_ARGS)

# GPU host: the autotuner (gates/tune.yaml, harness/tune): builds the candidate points in parallel (build/tune/),
# writes flashcore/tuned.yaml and kernel/tuned_points.inc, then rebuilds the library with those points; commit both.
# TUNE_ARGS="--resume reports/tune-<time>" continues an interrupted run.
tune:
	@PY=$$(ci/pyenv.sh gate) && $(MAKE) -s build && $$PY -m harness tune $(TUNE_ARGS) && $(MAKE) -s build

# Any host with nvcc (no GPU; the CPU test environment runs it): make tune's compile step alone, into build/tune/.
# A later make tune over the same kernel sources and space finds every object current and only times the points
# (on the H100 the compile step took 279 s of the 526 s device call that ran make tune: tune-365065b.log in
# reports/evidence/).
tune-build:
	@PY=$$(ci/pyenv.sh test) && $(MAKE) -s build && $$PY -m harness tune --build-only

# Rewrites the stored run of this GPU model (gates/bench.yaml stored_run.files: the file that records this GPU, else a
# new one named from it); commit it. Refused when FlashCore's spread is too high (a workload refused only for that
# is timed again first: gates/bench.yaml stored_run.remeasure).
bench-baseline:
	@PY=$$(ci/pyenv.sh gate) && $(MAKE) -s build && $$PY -m harness bench --update-baseline $(BENCH_ARGS)

# A GPU model the repository has no tuned table and no stored run for: both, in the order the stored run needs (it
# times the tuned library). Until then the checks that compare with a stored run are not applicable there.
prepare:
	@$(MAKE) -s tune && $(MAKE) -s bench-baseline

# GPU host: FA3's hopper/test_flash_attn.py (a checkout's, not in this repository) pointed at FlashCore's FA3 names
# (tools/fa3_tests/run.py), e.g. FA3_ARGS='--sample 150' for a deterministic sample.
FA3_HOPPER ?=
FA3_ARGS ?=
fa3-tests:
	@test -n "$(FA3_HOPPER)" || { echo "make fa3-tests: set FA3_HOPPER=<flash-attention checkout>/hopper" >&2; exit 2; }
	@PY=$$(ci/pyenv.sh gate) && $(MAKE) -s build && $$PY tools/fa3_tests/run.py --hopper $(FA3_HOPPER) $(FA3_ARGS)

# Every step runs even when an earlier one fails, so one run shows all problems; pytest's line comes last.
test:
	@PY=$$(ci/pyenv.sh test) || exit 1; failed=""; \
	echo "+ ruff check ."; $$PY -m ruff check . || failed="$$failed ruff"; \
	echo "+ mypy $(TYPED)"; $$PY -m mypy $(TYPED) || failed="$$failed mypy"; \
	echo "+ pytest -m 'not gpu' $(PYTEST_ARGS)"; $$PY -m pytest -m "not gpu" $(PYTEST_ARGS) || failed="$$failed pytest"; \
	if [ -n "$$failed" ]; then echo "make test: FAILED:$$failed" >&2; exit 1; fi

clean:
	rm -rf $(BUILD_DIR) .pytest_cache .mypy_cache .ruff_cache *.egg-info

distclean: clean
	rm -rf .venv .venv-gate
