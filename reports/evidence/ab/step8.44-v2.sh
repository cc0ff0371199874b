# step 8.44, third call: the tail with its partials summed by combine_tail_kernel, only for tails of <= 25 % of a wave
source .ab/setup.sh || exit 1
export PYTHONPATH=$PYTHONPATH:$PWD
L=$PWD/.ab/libs
D=$L/tail/flashcore_driver
for a in "4 16 16 8192 8192" "3 7 7 4097 4097" "1 134 134 128 3000" "1 17 17 1024 5000" "4 32 8 4096 4096" "4 16 16 8192 8192 --deterministic --sm-margin 20" "1 134 134 128 3000 --fault 3" "1 134 134 128 3000 --schedule 1"; do set -- $a
  for d in 64 128 256; do for t in e4m3 bf16 fp16; do timeout 60 $D --batch $1 --heads-q $2 --heads-kv $3 --seqlen-q $4 --seqlen-k $5 --head-dim $d --dtype $t $6 $7 $8 $9 --check --iters 1 2>&1 | grep -E "RESULT|rror" | cut -c1-90 | sed "s/^/d$d $t $a: /"; done; done
done > $OUT/checks.txt 2>&1
grep -v "status=ok" $OUT/checks.txt | grep -v "fault 3" | head -12; grep -c "status=ok" $OUT/checks.txt; grep -c "fault 3.*status=fail" $OUT/checks.txt
S=fp8-s8k,fp8-s8k-d256,d128,fp8-s4k,fp8-s4k-causal,fp8-s8k-causal,fp8-s4k-d256-causal
for r in 1 2; do
python3 bench/ab_kernels.py head=$L/head/libflashcore.so tail=$L/tail/libflashcore.so whole=$L/tail/libflashcore.so@schedule=3 --shapes $S --rounds 10 --flush-mib 256 > $OUT/ab$r.txt 2>&1
sed -n '/^speed vs fa3/,/geomean/p' $OUT/ab$r.txt; grep -E "FAIL|check failures" $OUT/ab$r.txt | cut -c1-100 | head -8; done
FLASHCORE_LIB=$L/tail/libflashcore.so timeout 240 python3 -m pytest -q -x tests/test_fp8_gpu.py tests/test_api_gpu.py tests/test_random_shapes_gpu.py > $OUT/pytest.txt 2>&1; tail -2 $OUT/pytest.txt
