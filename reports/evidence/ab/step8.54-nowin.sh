# step 8.54: FP8 kernels compile the mask's left-window bound out (nowin: all FP8; nw128: the softmax-ring kernels only), against head (12bcf1e)
source .ab/setup.sh || exit 1
export PYTHONPATH=$PYTHONPATH:$PWD
L=$PWD/.ab/libs
for b in nowin nw128; do D=$L/$b/flashcore_driver
for a in "1 2 2 640 640 128 e4m3 --causal" "2 32 8 4096 4096 128 e4m3 --causal" "3 33 11 777 3001 128 e4m3 --causal" "2 8 8 3001 777 128 e4m3 --causal" "1 16 16 8192 8192 128 e4m3 --causal --deterministic" "2 8 8 5000 5000 128 e4m3" "2 8 4 3001 1000 256 e4m3 --causal" "2 8 8 1000 3001 64 e4m3 --causal" "2 12 4 1000 5000 256 bf16 --causal" "3 7 7 4097 4097 128 bf16" "1 8 8 2048 2048 64 bf16 --causal"; do set -- $a
  timeout 60 $D --batch $1 --heads-q $2 --heads-kv $3 --seqlen-q $4 --seqlen-k $5 --head-dim $6 --dtype $7 ${@:8} --check --iters 1 2>&1 | grep -E "RESULT|rror" | cut -c1-150 | sed "s/^/$b $a: /"
done; done > $OUT/checks.txt 2>&1; cut -c1-150 $OUT/checks.txt
D=$L/nowin/flashcore_driver
for t in racecheck synccheck memcheck; do
  compute-sanitizer --tool $t --error-exitcode 9 $D --batch 1 --heads-q 2 --heads-kv 2 --seqlen-q 640 --seqlen-k 640 --head-dim 128 --dtype e4m3 --causal --check --iters 1 > $OUT/san-$t.txt 2>&1; echo "$t rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/san-$t.txt | head -1)"
done
S=fp8-s4k,fp8-s4k-causal,fp8-s8k,fp8-s8k-causal,fp8-gqa-causal,fp8-s4k-d256,fp8-s4k-d256-causal,fp8-s8k-d256-causal,fp8-s8k-d64-causal,s2k-causal
for r in 1 2 3; do
python3 bench/ab_kernels.py head=$L/h12/libflashcore.so nowin=$L/nowin/libflashcore.so nw128=$L/nw128/libflashcore.so --shapes $S --rounds 20 --flush-mib 256 > $OUT/ab$r.txt 2>&1
sed -n '/^speed vs fa3/,/geomean/p' $OUT/ab$r.txt; grep -E "FAIL|check failures|differ|geomean ratio" $OUT/ab$r.txt | cut -c1-120 | head -6; done
