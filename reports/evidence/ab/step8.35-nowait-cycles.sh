# step 8.35 call 5: nowait (no V^T flag waits, copy whole) against base and skip, elapsed cycles (ncu, --clock-control none)
source .ab/setup.sh || exit 1
R=$PWD
mk() { local n=$1; shift; rm -rf /tmp/src/$n; mkdir -p /tmp/src/$n; cp -r kernel Makefile /tmp/src/$n/
  (cd /tmp/src/$n && for f in "$@"; do patch -p1 -s < $R/$f; done) || echo "patch $n failed"; }
b() { make -s -j5 -C /tmp/src/$1 build BUILD_DIR=/tmp/b/$1 NVCC_EXTRA="$2" > /tmp/build-$1.log 2>&1 || { echo "build $1 failed"; tail -5 /tmp/build-$1.log; }; }
P=reports/evidence/ab/step8.33-vt-bounds.patch; Q=reports/evidence/ab/step8.35-vt-bounds-more.patch
mk base; mk nowait $P $Q; mk skip $P $Q
b base "" & b nowait "-DFLASHCORE_VT_BOUND=5" & b skip "-DFLASHCORE_VT_BOUND=4" & wait
M=gpu__time_duration.sum,sm__cycles_elapsed.max,sm__cycles_elapsed.avg.per_second
for s in "d256-s4k-causal 256 --causal" "d128-s4k-causal 128 --causal" "d128-s4k 128"; do set -- $s
  for v in base nowait skip base; do
    timeout 60 ncu --clock-control none --kernel-name regex:attention_forward --launch-skip 1 --launch-count 3 --metrics $M \
      /tmp/b/$v/flashcore_driver --batch 4 --heads-q 16 --heads-kv 16 --seqlen-q 4096 --seqlen-k 4096 --head-dim $2 $3 --dtype e4m3 --iters 5 > /tmp/ncu.txt 2>&1 || echo "$1 $v ncu rc=$?"
    grep -E "sm__cycles_elapsed.max" /tmp/ncu.txt | awk -v t="$1 $v" '{print t, $1, $(NF-1), $(NF)}'
  done
done > $OUT/ncu-nowait.txt 2>&1
cat $OUT/ncu-nowait.txt
