# step 8.35 call 4: the V^T copy's parts in elapsed cycles (ncu, --clock-control none): base, nold, nost, nox, skip
source .ab/setup.sh || exit 1
R=$PWD
mk() { local n=$1; shift; rm -rf /tmp/src/$n; mkdir -p /tmp/src/$n; cp -r kernel Makefile /tmp/src/$n/
  (cd /tmp/src/$n && for f in "$@"; do patch -p1 -s < $R/$f; done) || echo "patch $n failed"; }
b() { make -s -j3 -C /tmp/src/$1 build BUILD_DIR=/tmp/b/$1 NVCC_EXTRA="$2" > /tmp/build-$1.log 2>&1 || { echo "build $1 failed"; tail -5 /tmp/build-$1.log; }; }
P=reports/evidence/ab/step8.33-vt-bounds.patch; Q=reports/evidence/ab/step8.35-vt-bounds-more.patch
mk base; mk nold $P; mk nost $P; mk nox $P $Q; mk skip $P $Q
b base "" & b nold "-DFLASHCORE_VT_BOUND=1" & b nost "-DFLASHCORE_VT_BOUND=2" & b nox "-DFLASHCORE_VT_BOUND=3" & b skip "-DFLASHCORE_VT_BOUND=4" & wait
M=gpu__time_duration.sum,sm__cycles_elapsed.max,sm__cycles_elapsed.avg.per_second
for s in "d128-s4k 128" "d128-s4k-causal 128 --causal" "d256-s4k-causal 256 --causal"; do set -- $s
  for v in base nold nost nox skip; do
    timeout 60 ncu --clock-control none --kernel-name regex:attention_forward --launch-skip 1 --launch-count 2 --metrics $M \
      /tmp/b/$v/flashcore_driver --batch 4 --heads-q 16 --heads-kv 16 --seqlen-q 4096 --seqlen-k 4096 --head-dim $2 $3 --dtype e4m3 --iters 4 > /tmp/ncu.txt 2>&1 || echo "$1 $v ncu rc=$?"
    grep -E "gpu__time|sm__cycles" /tmp/ncu.txt | awk -v t="$1 $v" '{print t, $1, $(NF-1), $(NF)}'
  done
done > $OUT/ncu-parts.txt 2>&1
cat $OUT/ncu-parts.txt
