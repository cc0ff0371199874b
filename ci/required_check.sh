#!/usr/bin/env bash
# The `required` job of .github/workflows/ci.yml: the one status check branch protection requires.
# Passes only when the cpu and gpu jobs both succeeded. A pull request from a fork never runs the gpu job
# (fork code must not run on the self-hosted H100 runner), so the check fails for it by design and says how
# a maintainer gets the GPU gates run. Inputs (env): CPU_RESULT, GPU_RESULT (a job's needs.<job>.result:
# success, failure, cancelled, skipped; GPU_RESULT is the merge job's, the verdict of every share of the gpu job,
# or skipped with it), FORK_PR (true for a pull request from another repository).
set -uo pipefail
SUMMARY=${GITHUB_STEP_SUMMARY:-/dev/null}
cpu=${CPU_RESULT:-missing} gpu=${GPU_RESULT:-missing} fork=${FORK_PR:-false}
problems=()
[[ $cpu == success ]] || problems+=("cpu job (the CPU suite): $cpu")
if [[ $gpu != success ]]; then
  if [[ $gpu == skipped && $fork == true ]]; then
    problems+=("gpu job: skipped because this pull request comes from a fork, and fork code never runs on the
self-hosted H100 runner. A maintainer reviews the change, pushes it to a branch of this repository and opens
the pull request from there (see ci/README.md, 'Pull requests from forks').")
  else
    problems+=("gpu job (the phase gate named in ci/gate-phase): $gpu")
  fi
fi
if [[ ${#problems[@]} -eq 0 ]]; then
  echo "required: cpu and gpu jobs passed" | tee -a "$SUMMARY"
  exit 0
fi
{
  echo "required: FAILED"
  for p in "${problems[@]}"; do echo "- $p"; done
} | tee -a "$SUMMARY"
exit 1
