# step 8.35 call 2: clock event reasons, CTA-stride candidates, shared-memory transpose; then the paired A/B with checks
source .ab/setup.sh || exit 1
export PYTHONPATH=$PWD:$PYTHONPATH
R=$PWD
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,temperature.gpu --format=csv,noheader
mk() { local n=$1; shift; rm -rf /tmp/src/$n; mkdir -p /tmp/src/$n; cp -r kernel Makefile /tmp/src/$n/
  (cd /tmp/src/$n && for f in "$@"; do patch -p1 -s < $R/$f; done) || echo "patch $n failed"; }
b() { make -s -j3 -C /tmp/src/$1 build BUILD_DIR=/tmp/b/$1 NVCC_EXTRA="$2" > $OUT/build-$1.log 2>&1 || { echo "build $1 failed"; tail -5 $OUT/build-$1.log; }; }
P=reports/evidence/ab/step8.33-vt-bounds.patch; C=reports/evidence/ab/step8.35-vt-cta-stride.patch
mk base; mk nold $P; mk s2 $C; mk s4 $C; mk vtsmem
b base "" & b nold "-DFLASHCORE_VT_BOUND=1" & b s2 "-DFLASHCORE_VT_CTA_STRIDE=2" & b s4 "-DFLASHCORE_VT_CTA_STRIDE=4" & b vtsmem "-DFLASHCORE_FP8_VT_SMEM_ROWS_D128=1000000000 -DFLASHCORE_FP8_VT_SMEM_ROWS_D256=1000000000" & wait
L() { echo $1=/tmp/b/$1/libflashcore.so; }
python3 bench/clock_power.py $(L base) $(L nold) $(L s2) $(L s4) $(L vtsmem) \
  --shapes fp8-s4k-causal,fp8-s4k-d256-causal,fp8-s4k --seconds 1.5 --reps 2 > $OUT/clock.txt 2>&1; echo "clock rc=$?"
S=fp8-s4k,fp8-s4k-causal,fp8-s8k,fp8-s8k-causal,fp8-s4k-d256,fp8-s4k-d256-causal,fp8-s8k-d256-causal,fp8-s8k-d64,fp8-gqa-causal
python3 bench/ab_kernels.py $(L base) $(L s2) $(L s4) --shapes $S --rounds 10 --flush-mib 256 > $OUT/ab.txt 2>&1; echo "ab rc=$?"
cat $OUT/clock.txt
grep -A30 "^speed vs fa3" $OUT/ab.txt | grep -v cudnn; grep "check failures\|differ\|FAIL" $OUT/ab.txt | sort | uniq -c
