# step 8.44, sixth call: does v2's code cost the causal rows (no tail there)? head vs v2, three runs of 20 rounds
source .ab/setup.sh || exit 1
export PYTHONPATH=$PYTHONPATH:$PWD
L=$PWD/.ab/libs
S=fp8-s4k-causal,fp8-s8k-causal,fp8-s4k-d256-causal,fp8-gqa-causal,s2k-causal,d128-causal,fp8-s8k
for r in 1 2 3; do
python3 bench/ab_kernels.py head=$L/head/libflashcore.so v2=$L/v2/libflashcore.so --shapes $S --rounds 20 --flush-mib 256 > $OUT/ab$r.txt 2>&1
sed -n '/^speed vs fa3/,/geomean/p' $OUT/ab$r.txt; grep -E "FAIL|check failures" $OUT/ab$r.txt | cut -c1-100 | head -4; done
