# step 8.38 third call: the Q halves alone (xa) and the early issue with one Q barrier (xb), against base and xt
source .ab/setup.sh || exit 1
export PYTHONPATH=$PYTHONPATH:$PWD
b() { make -s -j4 build BUILD_DIR=/tmp/b/$1 NVCC_EXTRA="$2" > /tmp/build-$1.log 2>&1 || { echo "build $1 failed"; tail -5 /tmp/build-$1.log; }; }
X="-DFLASHCORE_FP8_D128_CROSS_TILE=1"
b base "" & b xt "$X" & b xa "$X -DFLASHCORE_XT_Q_ONLY" & b xb "$X -DFLASHCORE_XT_ONE_Q" & wait
for v in xa xb; do D=/tmp/b/$v/flashcore_driver
  for a in "4 16 16 4096 4096 --causal" "2 8 8 2048 2048 --causal --sm-margin 128" "2 32 8 1 3000" "1 4 4 4097 4097"; do set -- $a
    $D --batch $1 --heads-q $2 --heads-kv $3 --seqlen-q $4 --seqlen-k $5 --head-dim 128 --dtype e4m3 $6 $7 $8 --check --iters 1 | grep RESULT | cut -c1-60 | sed "s/^/$v $a: /"
  done
  timeout 120 compute-sanitizer --tool racecheck --error-exitcode 9 $D --batch 1 --heads-q 4 --heads-kv 4 --seqlen-q 1024 --seqlen-k 1024 --head-dim 128 --dtype e4m3 --causal --sm-margin 130 --iters 1 > /tmp/san.txt 2>&1; echo "$v racecheck rc=$?"
done > $OUT/checks.txt 2>&1; cat $OUT/checks.txt
S=fp8-s4k,fp8-s4k-causal,fp8-s4k-k1088,fp8-s8k-causal
python3 bench/ab_kernels.py base=/tmp/b/base/libflashcore.so xt=/tmp/b/xt/libflashcore.so xa=/tmp/b/xa/libflashcore.so xb=/tmp/b/xb/libflashcore.so --shapes $S --rounds 10 --flush-mib 256 > $OUT/ab.txt 2>&1
sed -n '/^summary/,$p' $OUT/ab.txt; grep -c differs $OUT/ab.txt
