#!/usr/bin/env bash
# Evidence run on an H100 host, about 6-8 minutes: build, the benchmark suite (make bench: every backend of a
# workload, and every point of one scaling sweep, timed in the same interleaved rounds), the paired ratios with
# their clock diagnostics, the stored run (make bench-baseline, from the suite's JSON), the perf-fa2 / perf-cudnn /
# scaling gates, and the perf selftest cases (a planted slow kernel must fail the regression check, planted noise
# alongside FlashCore's calls the paired ratios' spread limit).
#
#   bench/evidence.sh OUT        # OUT receives 8 files; the full outputs stay under $WORK
#
# OUT: bench.json (the suite's pytest-benchmark JSON: reports/evidence material), table.txt, bench-h100.json
# (the stored run for gates/baselines/), gates.html + gates.json (the three gates' report), slow.html and
# noisy.html (the planted selftest runs' reports), log.txt (everything printed, with the per-ratio diagnostics).
# FA3 is timed when `flash_attn_interface` or the fa3-fwd wheel is importable (else listed as not available).
# The tree may lack .git: set FLASHCORE_GIT_COMMIT. Clocks are never locked (shared machine).
set -uo pipefail
OUT=${1:?usage: bench/evidence.sh OUT}
WORK=${WORK:-/tmp/flashcore-evidence}
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
mkdir -p "$OUT" "$WORK"
exec > >(tee "$OUT/log.txt") 2>&1  # the whole log comes back, even when the run is cut short
step() { echo "=== $* ($(date -u +%T))"; }

step build
make -s build || { echo "build failed"; exit 1; }
$PY -c 'import torch, sys; print("torch", torch.__version__, torch.cuda.get_device_name(0))'
$PY -c 'import matplotlib; print("matplotlib", matplotlib.__version__)' || echo "matplotlib missing: tables only"

step "GPU checks of the timer and the backends"
timeout 120 $PY -m pytest -q -p no:cacheprovider tests/test_bench_gpu.py

step "benchmark suite (make bench)"
timeout 330 $PY -m harness bench --out "$WORK/suite"
echo "bench exit code $?"
cp "$WORK/suite/bench.json" "$WORK/suite/table.txt" "$OUT/" 2>/dev/null

step "paired ratios: run-to-run spread, per-round jitter, clock dependence (from the suite's JSON)"
timeout 60 $PY - "$WORK/suite/bench.json" <<'EOF'
import sys

from harness.bench import paired
from harness.bench.record import read_run

run = read_run(sys.argv[1])
print(f"{'workload':<20} {'vs':<9} {'ratio':>7} {'sd':>6} {'jitter':>7} {'clock dep':>9} {'sd@fixed':>8} "
      f"{'SM MHz':>10} {'abs sd ours/base':>16}")
for (w, b), m in run.measurements.items():
    ours = run.get(w, "flashcore")
    if b == "flashcore" or ours is None or not m.available or not ours.available:
        continue
    r = paired.speed_ratio(ours, m)
    if r is None:
        print(f"{w:<20} {b:<9} unpaired")
        continue
    dep = "n/a" if r.clock_dependence is None else f"{r.clock_dependence:+.2f}"
    fixed = "n/a" if r.fixed_clock_rel_std is None else f"{100 * r.fixed_clock_rel_std:.2f}%"
    mhz = "n/a" if r.clock_mhz is None else f"{r.clock_mhz[0]:.0f}-{r.clock_mhz[2]:.0f}"
    print(f"{w:<20} {b:<9} {r.value:7.3f} {100 * r.rel_std:5.2f}% {100 * r.summary.round_rel_std:6.2f}% {dep:>9} "
          f"{fixed:>8} {mhz:>10} {100 * ours.summary.rel_std:7.2f}%/{100 * m.summary.rel_std:.2f}%")
print("scaling, paired (FlashCore TFLOPS at 32K / at S, same rounds):")
for mode in ("", "-causal"):
    long = run.get(f"sweep-s32768{mode}", "flashcore")
    for s, name in ((2048, f"sweep-s2048{mode}"), (4096, f"sweep-s4096{mode}"), (8192, f"prefill-d128{mode}")):
        short = run.get(name, "flashcore")
        r = paired.ratio(long, short) if long and short else None
        print(f"  {'causal' if mode else 'non-causal':<10} 32K/{s:<5}: "
              + (f"{r.value:.3f}, sd {100 * r.rel_std:.2f} %, {r.summary.rounds} rounds" if r else "n/a"))
EOF

step "stored run (make bench-baseline, from the suite's JSON)"
$PY -m harness bench --from "$WORK/suite/bench.json" --update-baseline >/dev/null
echo "update-baseline exit code $?"
cp gates/baselines/bench-h100.json "$OUT/" 2>/dev/null

step "perf-fa2, perf-cudnn, scaling"
timeout 240 $PY - "$WORK/gates" <<'EOF'
import sys
from pathlib import Path

from harness import env
from harness.config import load_config
from harness.engine import run_gate
from harness.gates.base import GateContext
from harness.support.gpu import cuda_unavailable_reason
from harness.render import write_all
from harness.results import RunResult

out = Path(sys.argv[1])
(out / "logs").mkdir(parents=True, exist_ok=True)
config = load_config(Path("gates"))
results = []
for spec in (g for p in config.phases for g in p.gates if g.name in ("perf-fa2", "perf-cudnn", "scaling")):
    ctx = GateContext(spec=spec, config=config, run_dir=out, repo_root=Path.cwd(), seed=1,
                      step=lambda s: print("   ", s, flush=True))
    result = run_gate(spec, ctx, cuda_unavailable_reason())
    print(f"{spec.name}: {result.status.value}: {result.message}", flush=True)
    results.append(result)
write_all(RunResult(out.name, 6, tuple(results), env.collect(Path.cwd()), "", 0.0), out)
EOF
echo "gates exit code $?"
cp "$WORK/gates/index.html" "$OUT/gates.html" 2>/dev/null
cp "$WORK/gates/results.json" "$OUT/gates.json" 2>/dev/null

step "selftest: perf cases"
timeout 200 $PY - "$WORK/selftest" <<'EOF'
import sys
from pathlib import Path

from harness import selftest
from harness.config import load_config

config, root = load_config(Path("gates")), Path(sys.argv[1])
for case in (c for c in selftest.CASES if c.name.startswith("perf-")):
    ok, what = selftest.judge(case, case.run(config, root / case.name))
    print(f"selftest {case.name}: {'OK' if ok else 'WRONG'}: {what} ({case.why})", flush=True)
EOF

cp "$WORK/selftest/perf-slow/slow/index.html" "$OUT/slow.html" 2>/dev/null
cp "$WORK/selftest/perf-noisy/noisy/index.html" "$OUT/noisy.html" 2>/dev/null
ls -la "$OUT"
