# step 8.38: the next tile's first S GEMM issued in the epilogue (xt) against base, one tree; checks, sanitizer, time, cycles
source .ab/setup.sh || exit 1
export PYTHONPATH=$PYTHONPATH:$PWD
b() { make -s -j8 build BUILD_DIR=/tmp/b/$1 NVCC_EXTRA="$2" > /tmp/build-$1.log 2>&1 || { echo "build $1 failed"; tail -5 /tmp/build-$1.log; }; }
b base "" & b xt "-DFLASHCORE_FP8_D128_CROSS_TILE=1" & wait
grep -E "spill|C75(1[0-8]|20)" /tmp/b/xt/ptxas.log | grep -v "Li256\|Li64" | head -3
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader
D=/tmp/b/xt/flashcore_driver
{
for a in "2 8 8 1000 1000" "2 8 8 500 224" "1 4 4 4097 4097" "2 32 8 1 3000" "4 16 16 4096 4096"; do set -- $a
  for c in "" "--causal"; do
    $D --batch $1 --heads-q $2 --heads-kv $3 --seqlen-q $4 --seqlen-k $5 --head-dim 128 --dtype e4m3 $c --check --iters 1 | grep RESULT | sed "s/^/$a $c: /"
  done
done
$D --batch 2 --heads-q 32 --heads-kv 8 --seqlen-q 1 --seqlen-k 8192 --head-dim 128 --dtype e4m3 --splits 4 --check --iters 1 | grep RESULT | sed "s/^/split: /"
$D --batch 2 --heads-q 8 --heads-kv 8 --seqlen-q 2048 --seqlen-k 2048 --head-dim 128 --dtype e4m3 --causal --sm-margin 128 --check --iters 1 | grep RESULT | sed "s/^/4 CTAs causal: /"
$D --batch 2 --heads-q 8 --heads-kv 8 --seqlen-q 2048 --seqlen-k 2048 --head-dim 128 --dtype e4m3 --sm-margin 128 --check --iters 1 | grep RESULT | sed "s/^/4 CTAs: /"
for t in racecheck synccheck memcheck; do
  timeout 120 compute-sanitizer --tool $t --error-exitcode 9 $D --batch 1 --heads-q 4 --heads-kv 4 --seqlen-q 1024 --seqlen-k 1024 --head-dim 128 --dtype e4m3 --causal --sm-margin 130 --iters 1 > /tmp/san-$t.txt 2>&1; echo "sanitizer $t rc=$? $(grep -c 'ERROR SUMMARY: 0' /tmp/san-$t.txt)"
done
} > $OUT/checks.txt 2>&1
cat $OUT/checks.txt
FLASHCORE_LIB=/tmp/b/xt/libflashcore.so timeout 200 python3 -m pytest -q -x tests/test_fp8_gpu.py -p no:cacheprovider > $OUT/pytest.txt 2>&1; echo "pytest rc=$?"; tail -2 $OUT/pytest.txt
S=fp8-s4k,fp8-s4k-causal,fp8-s8k,fp8-s8k-causal,fp8-s4k-k1088,fp8-gqa-causal,fp8-s4k-d256-causal
python3 bench/ab_kernels.py base=/tmp/b/base/libflashcore.so xt=/tmp/b/xt/libflashcore.so --shapes $S --rounds 10 --flush-mib 256 > $OUT/ab.txt 2>&1
M=gpu__time_duration.sum,sm__cycles_elapsed.max,sm__cycles_elapsed.avg.per_second
for s in "d128-s4k 128" "d128-s4k-causal 128 --causal"; do set -- $s
  for v in base xt; do
    timeout 60 ncu --clock-control none --kernel-name regex:attention_forward --launch-skip 1 --launch-count 2 --metrics $M \
      /tmp/b/$v/flashcore_driver --batch 4 --heads-q 16 --heads-kv 16 --seqlen-q 4096 --seqlen-k 4096 --head-dim $2 $3 --dtype e4m3 --iters 4 > /tmp/ncu.txt 2>&1 || echo "$1 $v ncu rc=$?"
    grep -E "sm__cycles_elapsed.max" /tmp/ncu.txt | awk -v t="$1 $v" '{print t, $1, $(NF-1), $(NF)}'
  done
done > $OUT/ncu.txt 2>&1
sed -n '/^summary/,$p' $OUT/ab.txt; grep -c differs $OUT/ab.txt; cat $OUT/ncu.txt
