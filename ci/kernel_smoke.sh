#!/usr/bin/env bash
# GPU smoke test of the kernel through the standalone driver (no torch): each shape must pass the
# naive-reference check, each planted fault must fail it. Usage: ci/kernel_smoke.sh [BUILD_DIR]
set -uo pipefail
BUILD_DIR=${1:-build}
drv="$BUILD_DIR/flashcore_driver"
fails=0
run() {  # expect(ok|fail) args...
  local expect=$1; shift
  local out rc
  out=$("$drv" "$@" 2>&1); rc=$?
  local got=ok; [ $rc -ne 0 ] && got=fail
  local mark=PASS; [ "$got" != "$expect" ] && { mark=WRONG; fails=$((fails + 1)); }
  printf '%-5s expect=%-4s rc=%d %s | %s\n' "$mark" "$expect" "$rc" "$*" "$(echo "$out" | grep RESULT)"
  [ "$mark" = WRONG ] && echo "$out" | tail -5
}
for dt in bf16 fp16; do
  for d in 64 128 256; do
    run ok --batch 2 --heads-q 4 --heads-kv 4 --seqlen-q 200 --seqlen-k 200 --head-dim $d --dtype $dt --check
    run ok --batch 2 --heads-q 4 --heads-kv 2 --seqlen-q 333 --seqlen-k 333 --head-dim $d --dtype $dt --check --causal
  done
done
run ok --batch 1 --heads-q 2 --heads-kv 2 --seqlen-q 1 --seqlen-k 1 --head-dim 64 --dtype fp16 --check
run ok --batch 1 --heads-q 2 --heads-kv 2 --seqlen-q 17 --seqlen-k 17 --head-dim 128 --dtype bf16 --check --causal
run ok --batch 1 --heads-q 8 --heads-kv 2 --seqlen-q 300 --seqlen-k 1000 --head-dim 64 --dtype bf16 --check --causal
run ok --batch 1 --heads-q 4 --heads-kv 4 --seqlen-q 1000 --seqlen-k 300 --head-dim 128 --dtype fp16 --check --causal
run ok --batch 2 --heads-q 8 --heads-kv 8 --seqlen-q 1 --seqlen-k 4097 --head-dim 128 --dtype bf16 --check
run ok --batch 1 --heads-q 4 --heads-kv 4 --seqlen-q 4097 --seqlen-k 4097 --head-dim 128 --dtype bf16 --check
run ok --batch 2 --heads-q 8 --heads-kv 2 --seqlen-q 5 --seqlen-k 333 --head-dim 64 --dtype fp16 --check --causal
run ok --batch 1 --heads-q 4 --heads-kv 2 --seqlen-q 300 --seqlen-k 300 --head-dim 128 --dtype bf16 --check --kernel phase1
run ok --batch 3 --heads-q 16 --heads-kv 2 --seqlen-q 3 --seqlen-k 1000 --head-dim 64 --dtype bf16 --check --causal
run ok --batch 2 --heads-q 4 --heads-kv 2 --seqlen-q 1 --seqlen-k 777 --head-dim 256 --dtype fp16 --check
run ok --batch 2 --heads-q 32 --heads-kv 8 --seqlen-q 4 --seqlen-k 4 --head-dim 128 --dtype bf16 --check --causal
# narrow last blocks (a warpgroup that sees <= 64 keys of its tile's last block): aligned diagonal, offset
# diagonal, ragged seqlen_k, 3 consumer warpgroups
run ok --batch 2 --heads-q 4 --heads-kv 4 --seqlen-q 1024 --seqlen-k 1024 --head-dim 128 --dtype bf16 --check --causal
run ok --batch 1 --heads-q 4 --heads-kv 2 --seqlen-q 512 --seqlen-k 577 --head-dim 64 --dtype fp16 --check --causal
run ok --batch 1 --heads-q 4 --heads-kv 4 --seqlen-q 640 --seqlen-k 4161 --head-dim 128 --dtype bf16 --check
run ok --batch 1 --heads-q 4 --heads-kv 4 --seqlen-q 1000 --seqlen-k 1000 --head-dim 256 --dtype bf16 --check --causal
# tile knobs (fc_params block_n / schedule / l2_section_pct): the tuned table's hdim-128 causal choice, and the rest
run ok --batch 2 --heads-q 12 --heads-kv 12 --seqlen-q 1500 --seqlen-k 1500 --head-dim 128 --dtype bf16 --check --causal --block-n 176 --schedule 2 --l2-pct 50
run ok --batch 2 --heads-q 8 --heads-kv 2 --seqlen-q 900 --seqlen-k 900 --head-dim 128 --dtype fp16 --check --causal --schedule 1
run ok --batch 2 --heads-q 8 --heads-kv 8 --seqlen-q 700 --seqlen-k 700 --head-dim 64 --dtype bf16 --check --schedule 2 --l2-pct 5
run fail --batch 1 --heads-q 2 --heads-kv 2 --seqlen-q 100 --seqlen-k 100 --head-dim 128 --dtype bf16 --check --block-n 160
# split-KV (kernel/tile_scheduler.h): forced split counts on every head dim, dtype, causal offset and GQA packing;
# the automatic choice on a batch-1 decode; deterministic mode and sm_margin.
for d in 64 128 256; do
  run ok --batch 1 --heads-q 4 --heads-kv 2 --seqlen-q 300 --seqlen-k 1000 --head-dim $d --dtype bf16 --check --causal --splits 3
  run ok --batch 2 --heads-q 2 --heads-kv 2 --seqlen-q 1000 --seqlen-k 300 --head-dim $d --dtype fp16 --check --causal --splits 2
  run ok --batch 1 --heads-q 8 --heads-kv 2 --seqlen-q 3 --seqlen-k 3000 --head-dim $d --dtype bf16 --check --splits 128
done
run ok --batch 1 --heads-q 32 --heads-kv 8 --seqlen-q 1 --seqlen-k 65536 --head-dim 128 --dtype bf16 --check
run ok --batch 1 --heads-q 32 --heads-kv 8 --seqlen-q 1 --seqlen-k 65536 --head-dim 128 --dtype bf16 --check --deterministic
run ok --batch 1 --heads-q 32 --heads-kv 8 --seqlen-q 1 --seqlen-k 65536 --head-dim 128 --dtype bf16 --check --sm-margin 120
run ok --batch 1 --heads-q 16 --heads-kv 16 --seqlen-q 1000 --seqlen-k 1000 --head-dim 64 --dtype bf16 --check
run fail --batch 1 --heads-q 2 --heads-kv 2 --seqlen-q 100 --seqlen-k 1000 --head-dim 64 --dtype bf16 --check --splits 4 --fault 3
run fail --batch 1 --heads-q 2 --heads-kv 2 --seqlen-q 17 --seqlen-k 17 --head-dim 64 --dtype fp16 --check --tol 2e-3 --fault 1
run fail --batch 1 --heads-q 2 --heads-kv 2 --seqlen-q 100 --seqlen-k 100 --head-dim 64 --dtype bf16 --check --fault 3
echo "timing (no check):"
for sp in 1 0; do  # batch-1 decode without and with split-KV (0 = automatic)
  "$drv" --batch 1 --heads-q 32 --heads-kv 8 --seqlen-q 1 --seqlen-k 65536 --head-dim 128 --dtype bf16 --iters 50 --splits $sp | grep RESULT
done
"$drv" --batch 4 --heads-q 16 --heads-kv 16 --seqlen-q 8192 --seqlen-k 8192 --head-dim 128 --dtype bf16 --iters 20 | grep RESULT
"$drv" --batch 4 --heads-q 16 --heads-kv 16 --seqlen-q 8192 --seqlen-k 8192 --head-dim 128 --dtype bf16 --iters 20 --causal | grep RESULT
"$drv" --batch 4 --heads-q 16 --heads-kv 16 --seqlen-q 8192 --seqlen-k 8192 --head-dim 64 --dtype bf16 --iters 20 | grep RESULT
"$drv" --batch 4 --heads-q 16 --heads-kv 16 --seqlen-q 8192 --seqlen-k 8192 --head-dim 256 --dtype bf16 --iters 10 | grep RESULT
"$drv" --batch 64 --heads-q 32 --heads-kv 32 --seqlen-q 1 --seqlen-k 8192 --head-dim 128 --dtype bf16 --iters 10 | grep RESULT
echo "smoke: $fails unexpected result(s)"
exit $((fails > 0))
