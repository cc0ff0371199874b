# step 8.47: FP8 hdim 128 causal section sizes on kernel 8c0c1a7 (a launch setting: one library, @l2=PCT)
source .ab/setup.sh || exit 1
export PYTHONPATH=$PYTHONPATH:$PWD
C=$PWD/.ab/libs/cur/libflashcore.so
S=fp8-s4k-causal,fp8-s8k-causal,fp8-gqa-causal
for r in 1 2; do
python3 bench/ab_kernels.py d33=$C l20=$C@l2=20 l25=$C@l2=25 l50=$C@l2=50 --shapes $S --rounds 20 --flush-mib 256 > $OUT/ab$r.txt 2>&1
sed -n '/^speed vs fa3/,/geomean/p' $OUT/ab$r.txt; grep -E "FAIL|check failures|differ" $OUT/ab$r.txt | cut -c1-120 | head -6; done
