# step 8.35: clock and power against time (bench/clock_power.py) and ncu elapsed cycles, base against nold / nost
source .ab/setup.sh || exit 1
export PYTHONPATH=$PWD:$PYTHONPATH
R=$PWD
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader
mk() { local n=$1; shift; rm -rf /tmp/src/$n; mkdir -p /tmp/src/$n; cp -r kernel Makefile /tmp/src/$n/
  (cd /tmp/src/$n && for f in "$@"; do patch -p1 -s < $R/$f; done) || echo "patch $n failed"; }
b() { make -s -j5 -C /tmp/src/$1 build BUILD_DIR=/tmp/b/$1 NVCC_EXTRA="$2" > $OUT/build-$1.log 2>&1 || { echo "build $1 failed"; tail -5 $OUT/build-$1.log; }; }
P=reports/evidence/ab/step8.33-vt-bounds.patch
mk base; mk nold $P; mk nost $P
b base "" & b nold "-DFLASHCORE_VT_BOUND=1" & b nost "-DFLASHCORE_VT_BOUND=2" & wait
python3 bench/clock_power.py base=/tmp/b/base/libflashcore.so nold=/tmp/b/nold/libflashcore.so nost=/tmp/b/nost/libflashcore.so \
  --shapes fp8-s4k-causal,fp8-s4k-d256-causal,fp8-s4k --seconds 1.5 --reps 2 > $OUT/clock.txt 2>&1; echo "clock rc=$?"
M=gpu__time_duration.sum,sm__cycles_elapsed.max,sm__cycles_elapsed.avg.per_second,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum
for d in 256 128; do for v in base nold nost; do
  timeout 100 ncu --clock-control none --kernel-name regex:attention_forward --launch-skip 1 --launch-count 3 --metrics $M \
    /tmp/b/$v/flashcore_driver --batch 4 --heads-q 16 --heads-kv 16 --seqlen-q 4096 --seqlen-k 4096 \
    --head-dim $d --causal --dtype e4m3 --iters 4 > $OUT/ncu-d$d-$v.txt 2>&1; echo "ncu d$d $v rc=$?"
  grep -E "gpu__time|sm__cycles|dram__bytes|lts__t_bytes" $OUT/ncu-d$d-$v.txt | awk -v t="d$d $v" '{print t, $1, $(NF)}' | sort | uniq | head -20
done; done
cat $OUT/clock.txt
