#!/usr/bin/env bash
# The `merge` job of .github/workflows/ci.yml: the shards' reports of the phase gate as one (python -m harness
# merge), runnable by hand: ci/merge_job.sh DIR, where DIR holds each shard's artifacts (DIR/*/report/results.json).
# Writes $ARTIFACTS (default reports/ci-merged/): report/ (index.html, results.json, summary.md), merge.log,
# exit-code; appends report/summary.md to $GITHUB_STEP_SUMMARY. Exits with the merged verdict (0: every gate of
# the phase passed on some shard, and every share's gate command exited as its report says: DIR/*/report/exit-code,
# written by ci/gpu_job.sh), 1 when no shard left a report, 2 on an unusable file or files that are not the shares
# of one run (the reason goes to the step summary).
set -uo pipefail
DIR=${1:?usage: ci/merge_job.sh DIR, the directory of the shard artifacts}
DIR=$(cd "$DIR" 2>/dev/null && pwd) || { echo "ci/merge_job.sh: $1 is not a directory" >&2; exit 2; }
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
ARTIFACTS=${ARTIFACTS:-reports/ci-merged}
SUMMARY=${GITHUB_STEP_SUMMARY:-$ARTIFACTS/step-summary.md}
PHASE=${GATE_PHASE:-$(tr -d '[:space:]' <ci/gate-phase)}
PY=${PYTHON:-python3}
mkdir -p "$ARTIFACTS" || exit 1
rm -rf "$ARTIFACTS/report" "$ARTIFACTS/merge.log" "$ARTIFACTS/exit-code"
mapfile -t files < <(find "$DIR" -path '*/report/results.json' | sort)
if [[ ${#files[@]} -eq 0 ]]; then
  printf '## FlashCore gate-phase%s: no shard left a report\n\nNo report/results.json under %s (see each gpu job).\n' \
    "$PHASE" "$DIR" | tee -a "$SUMMARY"
  echo 1 >"$ARTIFACTS/exit-code"
  exit 1
fi
echo "ci/merge_job.sh: merging ${#files[@]} shard report(s) of phase $PHASE"
$PY -m harness merge --exit-codes --phase "$PHASE" --out "$ARTIFACTS/report" "${files[@]}" 2>&1 |
  tee "$ARTIFACTS/merge.log"
rc=${PIPESTATUS[0]}
if [[ -f $ARTIFACTS/report/summary.md ]]; then
  cat "$ARTIFACTS/report/summary.md" >>"$SUMMARY"
else
  [[ $rc -eq 0 ]] && rc=1
  printf '## FlashCore gate-phase%s: the shards were not merged (exit code %s)\n\n```\n%s\n```\n' "$PHASE" "$rc" \
    "$(tail -n 5 "$ARTIFACTS/merge.log")" >>"$SUMMARY"
fi
echo "$rc" >"$ARTIFACTS/exit-code"
exit "$rc"
