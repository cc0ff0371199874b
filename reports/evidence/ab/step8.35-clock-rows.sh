# step 8.35 call 6: bench/clock_power.py over the ten perf-fp8 rows, FlashCore (this tree) against FA3
source .ab/setup.sh || exit 1
export PYTHONPATH=$PWD:$PYTHONPATH
make -s -j16 build > /tmp/build.log 2>&1 || { tail -5 /tmp/build.log; exit 1; }
python3 bench/clock_power.py flashcore=build/libflashcore.so --seconds 1.5 --reps 2 \
  --shapes fp8-s4k,fp8-s4k-causal,fp8-s8k,fp8-s8k-causal,fp8-s4k-d256,fp8-s4k-d256-causal,fp8-s8k-d256,fp8-s8k-d256-causal,fp8-s8k-d64,fp8-s8k-d64-causal > $OUT/clock-rows.txt 2>&1; echo "clock rc=$?"
cat $OUT/clock-rows.txt
