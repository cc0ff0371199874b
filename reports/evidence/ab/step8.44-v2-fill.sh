# step 8.44, fourth call: tails over 25 % of a wave (t75: the same kernels, tails up to 75 % cut) and more shapes
source .ab/setup.sh || exit 1
export PYTHONPATH=$PYTHONPATH:$PWD
L=$PWD/.ab/libs
S=fp8-s4k,fp8-s4k-d256,odd-heads,s2k,d256,d128-fp16
for r in 1 2; do
python3 bench/ab_kernels.py head=$L/head/libflashcore.so tail=$L/tail/libflashcore.so t75=$L/t75/libflashcore.so --shapes $S --rounds 10 --flush-mib 256 > $OUT/ab$r.txt 2>&1
sed -n '/^speed vs fa3/,/geomean/p' $OUT/ab$r.txt; grep -E "FAIL|check failures" $OUT/ab$r.txt | cut -c1-100 | head -8; done
