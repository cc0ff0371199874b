# step 8.36: bound of the row sum's adds (timing only, wrong l): time and cycles against base
source .ab/setup.sh || exit 1
export PYTHONPATH=$PYTHONPATH:$PWD
R=$PWD
mk() { local n=$1; shift; rm -rf /tmp/src/$n; mkdir -p /tmp/src/$n; cp -r kernel Makefile /tmp/src/$n/
  (cd /tmp/src/$n && for f in "$@"; do patch -p1 -s < $R/$f; done) || echo "patch $n failed"; }
b() { make -s -j8 -C /tmp/src/$1 build BUILD_DIR=/tmp/b/$1 NVCC_EXTRA="$2" > /tmp/build-$1.log 2>&1 || { echo "build $1 failed"; tail -5 /tmp/build-$1.log; }; }
mk base; mk nrs reports/evidence/ab/step8.36-no-rowsum.patch
b base "" & b nrs "-DFLASHCORE_BOUND_NO_ROWSUM" & wait
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader
S=fp8-s4k,fp8-s4k-causal,fp8-s8k-causal,fp8-s4k-d256-causal
python3 bench/ab_kernels.py base=/tmp/b/base/libflashcore.so nrs=/tmp/b/nrs/libflashcore.so --shapes $S --rounds 10 --flush-mib 256 > $OUT/ab.txt 2>&1
M=gpu__time_duration.sum,sm__cycles_elapsed.max,sm__cycles_elapsed.avg.per_second
for s in "d128-s4k 128" "d128-s4k-causal 128 --causal" "d256-s4k-causal 256 --causal"; do set -- $s
  for v in base nrs; do
    timeout 60 ncu --clock-control none --kernel-name regex:attention_forward --launch-skip 1 --launch-count 2 --metrics $M \
      /tmp/b/$v/flashcore_driver --batch 4 --heads-q 16 --heads-kv 16 --seqlen-q 4096 --seqlen-k 4096 --head-dim $2 $3 --dtype e4m3 --iters 4 > /tmp/ncu.txt 2>&1 || echo "$1 $v ncu rc=$?"
    grep -E "gpu__time|sm__cycles" /tmp/ncu.txt | awk -v t="$1 $v" '{print t, $1, $(NF-1), $(NF)}'
  done
done > $OUT/ncu.txt 2>&1
sed -n '/^summary/,$p' $OUT/ab.txt; cat $OUT/ncu.txt
