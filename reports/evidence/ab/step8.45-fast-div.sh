# step 8.45: fast_div tile decode (fd) and fd + the write_partial fold + leftovers (fdf) against head 365065b
source .ab/setup.sh || exit 1
export PYTHONPATH=$PYTHONPATH:$PWD
L=$PWD/.ab/libs
for b in fd fdf; do D=$L/$b/flashcore_driver
for a in "1 134 134 64 1100 64 bf16" "1 136 17 64 1100 256 e4m3" "4 16 16 8192 8192 128 e4m3" "3 7 7 4097 4097 128 bf16" "2 8 8 1 5000 128 bf16" "2 32 8 4096 4096 128 e4m3 --causal" "3 33 11 777 3001 128 e4m3 --causal" "2 12 4 1000 5000 256 bf16 --causal" "1 16 16 8192 8192 128 e4m3 --deterministic --sm-margin 20"; do set -- $a
  timeout 60 $D --batch $1 --heads-q $2 --heads-kv $3 --seqlen-q $4 --seqlen-k $5 --head-dim $6 --dtype $7 ${@:8} --check --iters 1 2>&1 | grep -E "RESULT|rror" | cut -c1-150 | sed "s/^/$b $a: /"
done; done > $OUT/checks.txt 2>&1; cat $OUT/checks.txt | cut -c1-120
S=fp8-s4k,fp8-s4k-causal,fp8-s8k,fp8-s8k-causal,fp8-gqa-causal,fp8-s4k-d256-causal,odd-heads,s2k-causal
for r in 1 2; do
python3 bench/ab_kernels.py head=$L/head365/libflashcore.so fd=$L/fd/libflashcore.so fdf=$L/fdf/libflashcore.so --shapes $S --rounds 20 --flush-mib 256 > $OUT/ab$r.txt 2>&1
sed -n '/^speed vs fa3/,/geomean/p' $OUT/ab$r.txt; grep -E "FAIL|check failures|differ" $OUT/ab$r.txt | cut -c1-120 | head -6; done
