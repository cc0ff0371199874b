#!/usr/bin/env bash
# Device-only: captures real compute-sanitizer logs and ncu CSVs that the CPU tests use as fixtures.
# Usage (on an H100 host): ci/capture_fixtures.sh OUTDIR   -> OUTDIR/fixtures.tar.gz
set -uo pipefail
out=${1:?usage: ci/capture_fixtures.sh OUTDIR}
work=$(mktemp -d)
mkdir -p "$work/sanitizer" "$work/ncu"
make -f kernel/kernel.mk build >/dev/null 2>&1 || { echo "build failed"; exit 1; }
make -f kernel/kernel.mk planted >/dev/null || exit 1
cs=compute-sanitizer
$cs --version > "$work/sanitizer/version.txt" 2>&1
$cs --help > "$work/sanitizer/help.txt" 2>&1
small=(--batch 1 --heads-q 2 --heads-kv 1 --seqlen-q 77 --seqlen-k 130 --head-dim 64 --dtype bf16 --causal)
san() {  # name tool extra-args... -- command...
  local name=$1 tool=$2; shift 2
  local args=()
  while [ "$1" != "--" ]; do args+=("$1"); shift; done; shift
  local t0=$(date +%s%N)
  $cs --tool "$tool" "${args[@]}" "$@" > "$work/sanitizer/$name.log" 2>&1
  local rc=$?
  echo "$name tool=$tool rc=$rc wall_ms=$(( ($(date +%s%N) - t0) / 1000000 ))" | tee -a "$work/sanitizer/index.txt"
}
for mode in clean oob leak; do san "memcheck-$mode" memcheck --leak-check full --padding 32 --error-exitcode 86 -- build/planted $mode; done
san memcheck-oob-nopadding memcheck --error-exitcode 86 -- build/planted oob
for mode in clean race; do san "racecheck-$mode" racecheck --error-exitcode 86 -- build/planted $mode; done
san racecheck-race-exit0 racecheck -- build/planted race
for mode in clean divergent mbar barcount; do san "synccheck-$mode" synccheck --error-exitcode 86 -- build/planted $mode; done
for mode in clean uninit; do san "initcheck-$mode" initcheck --error-exitcode 86 -- build/planted $mode; done
for tool in memcheck racecheck synccheck initcheck; do
  extra=(--error-exitcode 86); [ $tool = memcheck ] && extra+=(--leak-check full --padding 32)
  san "kernel-$tool" $tool "${extra[@]}" -- build/flashcore_driver "${small[@]}" --check
done
# A truncated log (the first 60 % of a real one, summary line cut off): the parser must call it an ERROR.
oob="$work/sanitizer/memcheck-oob.log"
head -c $(( $(wc -c < "$oob") * 6 / 10 )) "$oob" > "$work/sanitizer/memcheck-oob-truncated.log"

# ncu: our kernel (prefill, decode), with several kernels in one report, and torch SDPA for contrast.
metrics=dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread,launch__shared_mem_per_block_dynamic,launch__grid_size,launch__block_size,sm__warps_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
ncu --version > "$work/ncu/version.txt" 2>&1
ncu --query-metrics > "$work/ncu/query-metrics.txt" 2>&1
nc() { local name=$1; shift; ncu --clock-control none --csv --page raw --print-units base "$@" > "$work/ncu/$name.csv" 2> "$work/ncu/$name.err"; echo "ncu $name rc=$?" | tee -a "$work/ncu/index.txt"; }
nc ours-prefill --metrics $metrics -k regex:attention_forward --launch-skip 1 --launch-count 2 build/flashcore_driver --batch 4 --heads-q 16 --heads-kv 16 --seqlen-q 8192 --seqlen-k 8192 --head-dim 128 --dtype bf16 --iters 3
nc ours-decode --metrics $metrics -k regex:attention_forward --launch-skip 1 --launch-count 2 build/flashcore_driver --batch 64 --heads-q 32 --heads-kv 32 --seqlen-q 1 --seqlen-k 8192 --head-dim 128 --dtype bf16 --iters 3
nc all-kernels --metrics $metrics --launch-count 6 build/flashcore_driver --batch 1 --heads-q 4 --heads-kv 4 --seqlen-q 256 --seqlen-k 256 --head-dim 64 --dtype fp16 --iters 2
ncu --clock-control none --section WarpStateStats --section Occupancy --csv --page raw --print-units base -k regex:attention_forward --launch-count 1 --export "$work/ncu/ours-prefill-stalls" build/flashcore_driver --batch 4 --heads-q 16 --heads-kv 16 --seqlen-q 4096 --seqlen-k 4096 --head-dim 128 --dtype bf16 --iters 1 > "$work/ncu/ours-prefill-stalls.csv" 2>&1
ncu --import "$work/ncu/ours-prefill-stalls.ncu-rep" --csv --page raw --print-units base > "$work/ncu/ours-prefill-stalls-import.csv" 2>&1
cat > "$work/sdpa.py" <<'PY'
import sys, torch
from torch.nn.attention import sdpa_kernel, SDPBackend
backend = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[sys.argv[1]]
b, h, sq, sk, d = map(int, sys.argv[2:7])
q = torch.randn(b, h, sq, d, device="cuda", dtype=torch.bfloat16)
k = torch.randn(b, h, sk, d, device="cuda", dtype=torch.bfloat16)
v = torch.randn(b, h, sk, d, device="cuda", dtype=torch.bfloat16)
with sdpa_kernel(backend):
    for _ in range(3):
        torch.nn.functional.scaled_dot_product_attention(q, k, v)
torch.cuda.synchronize()
PY
for be in flash cudnn; do
  nc sdpa-$be-prefill --metrics $metrics -k regex:'flash|fmha|cudnn|sm90|attn' --launch-skip 1 --launch-count 1 python3 "$work/sdpa.py" $be 4 16 8192 8192 128
  nc sdpa-$be-decode --metrics $metrics -k regex:'flash|fmha|cudnn|sm90|attn' --launch-skip 1 --launch-count 1 python3 "$work/sdpa.py" $be 64 32 1 8192 128
done
tar -C "$work" -czf "$out/fixtures.tar.gz" sanitizer ncu
echo "fixtures: $(tar -tzf "$out/fixtures.tar.gz" | wc -l) files"
