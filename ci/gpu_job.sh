#!/usr/bin/env bash
# The GPU job of .github/workflows/ci.yml, runnable by hand on the H100 host (same command, same outputs):
#   ci/gpu_job.sh        runs `make gate-phase$N`, N read from ci/gate-phase (the one place the CI phase is chosen)
# Writes $ARTIFACTS (default reports/ci/): report/ (the run directory: index.html, results.json, summary.md,
# logs/), gate.log (the console output), nvidia-smi.txt, exit-code. Appends report/summary.md to
# $GITHUB_STEP_SUMMARY (outside Actions: $ARTIFACTS/step-summary.md). Exits with the gate's exit code, or 1
# when the gate exited 0 without writing its report. GATE_PHASE overrides ci/gate-phase for manual runs only.
# SHARD=I/N (the workflow's matrix, ci/gate-shards): run share I of N of the phase (`--shard I/N`); the merge job
# joins the shares' reports. Unset or 1/1: the whole phase. Every share of one run gets one run id (--run-id: RUN_ID,
# else the Actions run and attempt), which also gives them one seed: the merge refuses shares of different runs.
# The exit code is also written beside report/results.json: the merge (--exit-codes) makes a share whose command
# failed after writing a passing report an ERROR.
# The run history (harness/history) lives outside the checkout, which actions/checkout cleans:
# $FLASHCORE_HISTORY (default ~/.cache/flashcore/history.sqlite on the runner); a copy goes into $ARTIFACTS.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1

ARTIFACTS=${ARTIFACTS:-reports/ci}  # git-ignored: the run must not see a dirty tree
SUMMARY=${GITHUB_STEP_SUMMARY:-$ARTIFACTS/step-summary.md}
PHASE=${GATE_PHASE:-$(tr -d '[:space:]' <ci/gate-phase)}
if ! [[ $PHASE =~ ^[1-7]$ ]]; then
  echo "ci/gpu_job.sh: the gate phase is '$PHASE' (ci/gate-phase or GATE_PHASE): expected one of 1..7" >&2
  exit 2
fi

SHARD=${SHARD:-1/1}
if ! [[ $SHARD =~ ^([1-9][0-9]*)/([1-9][0-9]*)$ ]] || (( BASH_REMATCH[1] > BASH_REMATCH[2] )); then
  echo "ci/gpu_job.sh: SHARD is '$SHARD': expected I/N with 1 <= I <= N" >&2
  exit 2
fi
shard_args=""
if [[ $SHARD != 1/1 ]]; then
  run_id=${RUN_ID:-${GITHUB_RUN_ID:+gh$GITHUB_RUN_ID-${GITHUB_RUN_ATTEMPT:-1}-phase$PHASE}}
  if ! [[ $run_id =~ ^[A-Za-z0-9._-]+$ ]]; then
    echo "ci/gpu_job.sh: SHARD=$SHARD needs RUN_ID, one id for every share of the run (letters, digits, . _ -;" \
      "in GitHub Actions it is the run's id); got '$run_id'" >&2
    exit 2
  fi
  shard_args=" --shard $SHARD --run-id $run_id"
fi

export FLASHCORE_HISTORY=${FLASHCORE_HISTORY:-$HOME/.cache/flashcore/history.sqlite}
report="$ARTIFACTS/report"
mkdir -p "$ARTIFACTS" || exit 1
rm -rf "$report" "$ARTIFACTS/gate.log" "$ARTIFACTS/nvidia-smi.txt" "$ARTIFACTS/exit-code" "$ARTIFACTS/step-summary.md" \
  "$ARTIFACTS/history.sqlite"
{ nvidia-smi || echo "nvidia-smi failed (exit code $?)"; } >"$ARTIFACTS/nvidia-smi.txt" 2>&1
echo "ci/gpu_job.sh: make gate-phase$PHASE, share $SHARD (report in $report)"
make "gate-phase$PHASE" GATE_ARGS="--out $report$shard_args" 2>&1 | tee "$ARTIFACTS/gate.log"
rc=${PIPESTATUS[0]}

if [[ -f $report/summary.md ]]; then
  cat "$report/summary.md" >>"$SUMMARY"
else
  printf '## FlashCore gate-phase%s: no report\n\n`make gate-phase%s` exited %s without writing %s (see gate.log in the artifacts).\n' \
    "$PHASE" "$PHASE" "$rc" "$report/summary.md" >>"$SUMMARY"
  [[ $rc -eq 0 ]] && rc=1
fi
[[ -f $FLASHCORE_HISTORY ]] && cp "$FLASHCORE_HISTORY" "$ARTIFACTS/history.sqlite"
echo "$rc" >"$ARTIFACTS/exit-code"
[[ -d $report ]] && echo "$rc" >"$report/exit-code"  # beside results.json, where `harness merge --exit-codes` reads it
echo "ci/gpu_job.sh: gate-phase$PHASE exit code $rc"
exit "$rc"
