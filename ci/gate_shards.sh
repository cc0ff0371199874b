#!/usr/bin/env bash
# The `plan` job of .github/workflows/ci.yml: how many self-hosted GPU runners share the phase gate, from
# ci/gate-shards (one number, 1..16; 1: one runner runs the whole phase). Prints GitHub step outputs:
#   count=N
#   shards=[1,...,N]      (the gpu job's matrix; each runs `make gate-phaseN` with --shard I/N)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
n=$(tr -d '[:space:]' <ci/gate-shards)
if ! [[ $n =~ ^([1-9]|1[0-6])$ ]]; then
  echo "ci/gate_shards.sh: ci/gate-shards holds '$n': expected a number of runners, 1..16" >&2
  exit 2
fi
list=$(seq -s, 1 "$n")
echo "count=$n"
echo "shards=[$list]"
