# step 8.37: the dynamic order's section size for FP8 causal calls (fc_params.l2_section_pct), one library
source .ab/setup.sh || exit 1
export PYTHONPATH=$PYTHONPATH:$PWD
make -s -j16 build > /tmp/build.log 2>&1 || { echo "build failed"; tail -5 /tmp/build.log; }
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader
L=build/libflashcore.so
S=fp8-s4k-causal,fp8-s8k-causal,fp8-s4k-d256-causal,fp8-s8k-d256-causal,fp8-gqa-causal
for r in 1 2; do echo "## run $r"; python3 bench/ab_kernels.py base=$L p20=$L@l2=20 p67=$L@l2=67 p100=$L@l2=100 --shapes $S --rounds 10 --flush-mib 256; done > $OUT/ab.txt 2>&1
grep -A8 "^speed vs fa3" $OUT/ab.txt; grep -c "differs\|FAIL" $OUT/ab.txt
