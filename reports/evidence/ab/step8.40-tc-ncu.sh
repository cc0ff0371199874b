# step 8.40, why tc3 lost: ncu cycles, tensor-pipe activity, instructions and stall reasons, head against tc3
source .ab/setup.sh || exit 1
L=$PWD/.ab/libs
M=sm__cycles_elapsed.max,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,sm__inst_executed_pipe_uniform.sum
for s in "d128-s4k" "d128-s4k-causal --causal"; do set -- $s
  for v in head tc3; do
    timeout 120 ncu --clock-control none --kernel-name regex:attention_forward --launch-skip 1 --launch-count 1 --metrics $M --section WarpStateStats \
      $L/$v/flashcore_driver --batch 4 --heads-q 16 --heads-kv 16 --seqlen-q 4096 --seqlen-k 4096 --head-dim 128 $2 --dtype e4m3 --iters 3 > $OUT/ncu-$1-$v.txt 2>&1 || echo "$1 $v ncu rc=$?"
    grep -E "sm__cycles|tensor_op|inst_executed|Stall|stall|Warp Cycles" $OUT/ncu-$1-$v.txt | awk -v t="$1 $v" '{$1=$1; print t": "$0}'
  done
done > $OUT/ncu.txt 2>&1; cat $OUT/ncu.txt | cut -c1-160
