# step 8.44, second call: where the tail's time goes (tv1: partials and counts, no combine; tv2: no tail epilogue)
source .ab/setup.sh || exit 1
export PYTHONPATH=$PYTHONPATH:$PWD
L=$PWD/.ab/libs
S=fp8-s4k,fp8-s4k-d256,fp8-s8k,d128
for r in 1 2; do
python3 bench/ab_kernels.py head=$L/head/libflashcore.so tail=$L/tail/libflashcore.so tail_w=$L/tail/libflashcore.so@schedule=3 tv1=$L/tv1/libflashcore.so tv1_w=$L/tv1/libflashcore.so@schedule=3 tv2=$L/tv2/libflashcore.so tv2_w=$L/tv2/libflashcore.so@schedule=3 --shapes $S --rounds 10 --flush-mib 256 > $OUT/ab$r.txt 2>&1
sed -n '/^speed vs fa3/,/geomean/p' $OUT/ab$r.txt; grep -E "ms " $OUT/ab$r.txt | head -4; grep -E "FAIL|check failures" $OUT/ab$r.txt | cut -c1-100 | head -8; done
