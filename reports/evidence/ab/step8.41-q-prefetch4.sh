# step 8.41, fourth call: qc (the coordinates computed, no prefetch) against head, qs and qp3
source .ab/setup.sh || exit 1
export PYTHONPATH=$PYTHONPATH:$PWD
L=$PWD/.ab/libs
$L/qc/flashcore_driver --batch 4 --heads-q 16 --heads-kv 16 --seqlen-q 4096 --seqlen-k 4096 --head-dim 128 --dtype e4m3 --causal --check --iters 1 | grep RESULT | cut -c1-48
S=fp8-s4k,fp8-s4k-causal,fp8-gqa-causal
python3 bench/ab_kernels.py head=$L/head/libflashcore.so qc=$L/qc/libflashcore.so qs=$L/qs/libflashcore.so qp3=$L/qp3/libflashcore.so --shapes $S --rounds 10 --flush-mib 256 > $OUT/ab.txt 2>&1
sed -n '/^speed vs fa3/,$p' $OUT/ab.txt
