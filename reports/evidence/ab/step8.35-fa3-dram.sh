# step 8.35 call 3: share C of make gate-phase7 at HEAD; clock_power --const-v; ncu DRAM bytes and cycles, FlashCore and FA3
# (on the device: .ab/setup.sh puts the nvtx wheel and the fa3-fwd 0.0.3 wheel on PYTHONPATH and sets FLASHCORE_GIT_COMMIT; .ab/g.sh runs one share of make gate-phase7 --only LIST)
source .ab/setup.sh || exit 1
bash .ab/g.sh build,correctness,determinism,sanitizer,structure-tma,structure-wgmma,correctness-long,api,random-shapes,determinism-strict,determinism-gpus,integrations > $OUT/shareC.txt 2>&1
tail -25 $OUT/shareC.txt
export PYTHONPATH=$PWD:$PYTHONPATH
python3 bench/clock_power.py base=build/libflashcore.so --const-v --shapes fp8-s4k-d256-causal,fp8-s4k-causal --seconds 1.5 --reps 2 > $OUT/clock-cv.txt 2>&1; echo "clock rc=$?"
M=gpu__time_duration.sum,sm__cycles_elapsed.max,sm__cycles_elapsed.avg.per_second,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum
for s in "fp8-s4k-d256-causal 256 --causal" "fp8-s4k-causal 128 --causal" "fp8-s4k 128"; do set -- $s
  timeout 100 ncu --clock-control none --kernel-name-base demangled --kernel-name regex:[Ff]lash --launch-skip 1 --launch-count 2 --metrics $M \
    python3 reports/evidence/ab/step8.35-fa3-ncu.py $1 > $OUT/ncu-fa3-$1.txt 2>&1; echo "ncu fa3 $1 rc=$?"
  timeout 100 ncu --clock-control none --kernel-name regex:attention_forward --launch-skip 1 --launch-count 2 --metrics $M \
    build/flashcore_driver --batch 4 --heads-q 16 --heads-kv 16 --seqlen-q 4096 --seqlen-k 4096 --head-dim $2 $3 --dtype e4m3 --iters 4 > $OUT/ncu-fc-$1.txt 2>&1; echo "ncu fc $1 rc=$?"
  for w in fa3 fc; do grep -E "gpu__time|sm__cycles|dram__bytes|lts__t_bytes" $OUT/ncu-$w-$1.txt | awk -v t="$1 $w" '{print t, $1, $(NF-1), $(NF)}'; done
done > $OUT/ncu.txt
cat $OUT/ncu.txt; cat $OUT/clock-cv.txt
