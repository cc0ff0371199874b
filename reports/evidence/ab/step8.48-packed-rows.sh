# step 8.48: packed GQA's row split by fast division in the consumers (tr) against 317b96e's library (cur)
source .ab/setup.sh || exit 1
export PYTHONPATH=$PYTHONPATH:$PWD
L=$PWD/.ab/libs
S=fp8-s4k,fp8-s4k-causal,fp8-s8k-causal,fp8-gqa-causal,decode-b1-gqa,decode,gqa-causal
for r in 1 2; do
python3 bench/ab_kernels.py cur=$L/cur/libflashcore.so tr=$L/tr/libflashcore.so --shapes $S --rounds 20 --flush-mib 256 > $OUT/ab$r.txt 2>&1
sed -n '/^speed vs fa3/,/geomean/p' $OUT/ab$r.txt; grep -E "FAIL|check failures|differ" $OUT/ab$r.txt | cut -c1-120 | head -6
grep -E "^decode-b1-gqa|t\(x\)" $OUT/ab$r.txt | head -14; done
