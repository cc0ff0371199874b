# step 8.43, second call: ns as committed (ns2) and without first(Narrow)'s unreachable unmasked copy (slim)
source .ab/setup.sh || exit 1
export PYTHONPATH=$PYTHONPATH:$PWD
L=$PWD/.ab/libs
for v in ns2 slim; do D=$L/$v/flashcore_driver
for a in "4 16 16 4096 4096 --causal" "2 8 8 2048 2048 --causal --sm-margin 128" "2 32 8 1 3000" "1 4 4 4097 4097 --causal" "2 8 8 500 224 --causal" "2 8 8 224 500 --causal" "1 8 2 333 1000 --causal" "2 8 8 100 40 --causal"; do set -- $a
  for d in 64 128 256; do for t in e4m3 bf16; do $D --batch $1 --heads-q $2 --heads-kv $3 --seqlen-q $4 --seqlen-k $5 --head-dim $d --dtype $t $6 $7 $8 --check --iters 1 2>&1 | grep -E "RESULT|rror" | cut -c1-60 | sed "s/^/$v d$d $t $a: /"; done; done
done; done > $OUT/checks.txt 2>&1
grep -v "status=ok" $OUT/checks.txt | head -20; grep -c "status=ok" $OUT/checks.txt
FLASHCORE_LIB=$L/slim/libflashcore.so timeout 300 python3 -m pytest -q -x tests/test_fp8_gpu.py tests/test_api_gpu.py tests/test_random_shapes_gpu.py tests/test_serving_gpu.py > $OUT/pytest.txt 2>&1; tail -2 $OUT/pytest.txt
S=fp8-s4k-causal,fp8-s8k-causal,fp8-gqa-causal,fp8-s4k,fp8-s8k,fp8-s4k-d256-causal,s2k-causal,gqa-causal
for r in 1 2 3; do
python3 bench/ab_kernels.py head=$L/head/libflashcore.so ns2=$L/ns2/libflashcore.so slim=$L/slim/libflashcore.so --shapes $S --rounds 10 --flush-mib 256 > $OUT/ab$r.txt 2>&1
sed -n '/^speed vs fa3/,/geomean/p' $OUT/ab$r.txt; grep -c differs $OUT/ab$r.txt; done
