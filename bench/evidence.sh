#!/usr/bin/env bash
# Evidence run on an H100 host, about 6-8 minutes: build, the benchmark suite (make bench), the stored run
# (make bench-baseline, from the suite's JSON), the perf-fa2 / perf-cudnn / scaling gates, and the perf selftest
# cases (a planted slow kernel must fail the regression check, planted noise the spread limit).
#
#   bench/evidence.sh OUT        # OUT receives 8 files; the full outputs stay under $WORK
#
# OUT: bench.json (the suite's pytest-benchmark JSON: reports/evidence material), table.txt, bench-h100.json
# (the stored run for gates/baselines/), gates.html + gates.json (the three gates' report), slow.html and
# noisy.html (the planted selftest runs' reports), log.txt (everything printed). FA3 is timed when `flash_attn_interface` or the fa3-fwd
# wheel is importable (else listed as not available). The tree may lack .git: set FLASHCORE_GIT_COMMIT.
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
from harness.gates.gpu import cuda_unavailable_reason
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
