# step 8.44, seventh call: v3 (the tail as a kernel instantiation of its own, kTail) against head
source .ab/setup.sh || exit 1
export PYTHONPATH=$PYTHONPATH:$PWD
L=$PWD/.ab/libs; D=$L/v3/flashcore_driver
for a in "1 134 134 64 1100 64 bf16" "1 136 17 64 1100 256 e4m3" "4 16 16 8192 8192 128 e4m3" "3 7 7 4097 4097 128 bf16" "4 16 16 4096 4096 128 e4m3 --causal"; do set -- $a
  timeout 60 $D --batch $1 --heads-q $2 --heads-kv $3 --seqlen-q $4 --seqlen-k $5 --head-dim $6 --dtype $7 $8 $9 --check --iters 1 2>&1 | grep -E "RESULT|rror" | cut -c1-150 | sed "s/^/$a: /"
done > $OUT/checks.txt 2>&1; cat $OUT/checks.txt
for a in "1 134 134 64 1100 64 bf16" "1 136 17 64 1100 256 e4m3"; do set -- $a; for tool in memcheck racecheck synccheck initcheck; do
  timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 $D --batch $1 --heads-q $2 --heads-kv $3 --seqlen-q $4 --seqlen-k $5 --head-dim $6 --dtype $7 --check --iters 1 > /tmp/san.log 2>&1; echo "rc=$? $tool $a"; done; done > $OUT/sanitizer.txt; cat $OUT/sanitizer.txt | tr '\n' ';'; echo
S=fp8-s8k,odd-heads,fp8-s4k-causal,fp8-gqa-causal,s2k-causal,fp8-s4k
for r in 1 2; do
python3 bench/ab_kernels.py head=$L/head/libflashcore.so v3=$L/v3/libflashcore.so --shapes $S --rounds 20 --flush-mib 256 > $OUT/ab$r.txt 2>&1
sed -n '/^speed vs fa3/,/geomean/p' $OUT/ab$r.txt; grep -E "FAIL|check failures" $OUT/ab$r.txt | cut -c1-100 | head -4; done
