# step 8.40: FP8 hdim 128 row sum on the tensor core (tc2: waited at once; tc3: under O's rescale) against head
source .ab/setup.sh || exit 1
export PYTHONPATH=$PYTHONPATH:$PWD
L=$PWD/.ab/libs
for v in tc2 tc3; do D=$L/$v/flashcore_driver
  for a in "4 16 16 4096 4096 --causal" "2 8 8 2048 2048 --causal --sm-margin 128" "2 32 8 1 3000" "1 4 4 4097 4097" "2 8 8 500 224 --causal" "1 8 8 2048 8192"; do set -- $a
    $D --batch $1 --heads-q $2 --heads-kv $3 --seqlen-q $4 --seqlen-k $5 --head-dim 128 --dtype e4m3 $6 $7 $8 --check --iters 1 | grep RESULT | cut -c1-70 | sed "s/^/$v $a: /"
  done
  timeout 120 compute-sanitizer --tool racecheck --error-exitcode 9 $D --batch 1 --heads-q 4 --heads-kv 4 --seqlen-q 1024 --seqlen-k 1024 --head-dim 128 --dtype e4m3 --causal --sm-margin 130 --iters 1 > /tmp/san.txt 2>&1; echo "$v racecheck rc=$?"
  timeout 120 compute-sanitizer --tool synccheck --error-exitcode 9 $D --batch 1 --heads-q 4 --heads-kv 4 --seqlen-q 1024 --seqlen-k 1024 --head-dim 128 --dtype e4m3 --sm-margin 130 --iters 1 > /tmp/san.txt 2>&1; echo "$v synccheck rc=$?"
done > $OUT/checks.txt 2>&1; cat $OUT/checks.txt
( FLASHCORE_LIB=$L/head/libflashcore.so python3 .ab/tc_acc.py head --fa3
  FLASHCORE_LIB=$L/tc2/libflashcore.so python3 .ab/tc_acc.py tc2
  FLASHCORE_LIB=$L/tc3/libflashcore.so python3 .ab/tc_acc.py tc3 ) > $OUT/acc.txt 2>&1; sort -k2 $OUT/acc.txt | cut -c1-150
S=fp8-s4k,fp8-s4k-causal,fp8-s8k,fp8-s8k-causal,fp8-gqa-causal,fp8-s4k-d256-causal
python3 bench/ab_kernels.py head=$L/head/libflashcore.so tc2=$L/tc2/libflashcore.so tc3=$L/tc3/libflashcore.so --shapes $S --rounds 10 --flush-mib 256 > $OUT/ab.txt 2>&1
sed -n '/^summary/,$p' $OUT/ab.txt
FLASHCORE_LIB=$L/tc3/libflashcore.so timeout 200 python3 -m pytest -q -x tests/test_fp8_gpu.py > $OUT/pytest-tc3.txt 2>&1; tail -3 $OUT/pytest-tc3.txt
