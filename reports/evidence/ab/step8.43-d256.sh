# step 8.43 follow-up: a second perf-fp8 reading of kernel 2509ef6 on another H100, and head against ns2 on the
# hdim 256 rows that read 0.5-0.8 % lower in the gate run than at 09056db
source .ab/setup.sh || exit 1
export PYTHONPATH=$PYTHONPATH:$PWD
L=$PWD/.ab/libs
S=fp8-s4k-d256,fp8-s8k-d256,fp8-s8k-d256-causal,fp8-s4k-d256-causal,fp8-s8k-d64,fp8-s4k
for r in 1 2; do python3 bench/ab_kernels.py head=$L/head/libflashcore.so ns2=$L/ns2/libflashcore.so --shapes $S --rounds 10 --flush-mib 256 > $OUT/ab$r.txt 2>&1
sed -n '/^speed vs fa3/,/geomean/p' $OUT/ab$r.txt; grep -c differs $OUT/ab$r.txt; done
bash .ab/g2.sh build,perf-fp8
