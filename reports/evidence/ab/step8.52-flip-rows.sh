# step 8.52: causal tiles: warpgroup 0 (first in the softmax ring) takes the bottom rows (flip) against pf
source .ab/setup.sh || exit 1
export PYTHONPATH=$PYTHONPATH:$PWD
L=$PWD/.ab/libs
D=$L/flip/flashcore_driver
for a in "1 2 2 640 640 128 e4m3 --causal" "2 32 8 4096 4096 128 e4m3 --causal" "3 33 11 777 3001 128 e4m3 --causal" "2 8 8 3001 777 128 e4m3 --causal" "2 8 8 3001 3001 128 e4m3 --causal" "1 16 16 8192 8192 128 e4m3 --causal --deterministic" "4 16 16 4096 4096 128 e4m3 --causal" "2 8 8 5000 5000 128 e4m3" "1 4 4 333 5000 128 e4m3 --causal"; do set -- $a
  timeout 60 $D --batch $1 --heads-q $2 --heads-kv $3 --seqlen-q $4 --seqlen-k $5 --head-dim $6 --dtype $7 ${@:8} --check --iters 1 2>&1 | grep -E "RESULT|rror" | cut -c1-150 | sed "s/^/$a: /"
done > $OUT/checks.txt 2>&1; cut -c1-150 $OUT/checks.txt
for t in racecheck synccheck memcheck; do
  compute-sanitizer --tool $t --error-exitcode 9 $D --batch 1 --heads-q 2 --heads-kv 2 --seqlen-q 640 --seqlen-k 640 --head-dim 128 --dtype e4m3 --causal --check --iters 1 > $OUT/san-$t.txt 2>&1; echo "$t rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/san-$t.txt | head -1)"
done
S=fp8-s4k,fp8-s4k-causal,fp8-s8k,fp8-s8k-causal,fp8-gqa-causal,fp8-s4k-k1088,fp8-s4k-d256-causal
for r in 1 2 3; do
python3 bench/ab_kernels.py pf=$L/pf/libflashcore.so flip=$L/flip/libflashcore.so --shapes $S --rounds 20 --flush-mib 256 > $OUT/ab$r.txt 2>&1
sed -n '/^speed vs fa3/,/geomean/p' $OUT/ab$r.txt; grep -E "FAIL|check failures|differ" $OUT/ab$r.txt | cut -c1-120 | head -6; done
