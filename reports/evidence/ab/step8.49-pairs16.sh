# step 8.49: the mask by f16x2 pairs on 16 tiles, FP8 only (pf) against head 317b96e's library (kernel 8c0c1a7)
source .ab/setup.sh || exit 1
export PYTHONPATH=$PYTHONPATH:$PWD
L=$PWD/.ab/libs
for b in pf; do D=$L/$b/flashcore_driver
for a in "2 32 8 4096 4096 128 e4m3 --causal" "3 33 11 777 3001 128 e4m3 --causal" "2 8 8 3001 777 128 e4m3 --causal" "1 16 16 1000 1000 256 e4m3 --causal" "2 12 4 1000 5000 256 bf16 --causal" "2 8 8 3001 777 128 bf16 --causal" "3 7 7 4097 4097 128 bf16" "1 8 8 2048 2048 64 bf16 --causal" "1 16 16 8192 8192 128 e4m3 --causal --deterministic" "2 8 8 1000 3001 64 e4m3 --causal" "2 8 4 3001 1000 256 e4m3 --causal" "2 8 8 5000 5000 128 e4m3"; do set -- $a
  timeout 60 $D --batch $1 --heads-q $2 --heads-kv $3 --seqlen-q $4 --seqlen-k $5 --head-dim $6 --dtype $7 ${@:8} --check --iters 1 2>&1 | grep -E "RESULT|rror" | cut -c1-150 | sed "s/^/$b $a: /"
done; done > $OUT/checks.txt 2>&1; cut -c1-140 $OUT/checks.txt
S=fp8-s4k,fp8-s4k-causal,fp8-s8k,fp8-s8k-causal,fp8-gqa-causal,fp8-s4k-d256-causal,fp8-s8k-d256-causal,fp8-s8k-d64-causal
for r in 1 2 3; do
python3 bench/ab_kernels.py head=$L/head/libflashcore.so pf=$L/pf/libflashcore.so --shapes $S --rounds 20 --flush-mib 256 > $OUT/ab$r.txt 2>&1
sed -n '/^speed vs fa3/,/geomean/p' $OUT/ab$r.txt; grep -E "FAIL|check failures|differ" $OUT/ab$r.txt | cut -c1-120 | head -6; done
