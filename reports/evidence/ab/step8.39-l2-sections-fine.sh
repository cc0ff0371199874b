# step 8.39: finer section sizes around the defaults (hdim 128: a third; hdim 256: two thirds), one library, no build change
source .ab/setup.sh || exit 1
export PYTHONPATH=$PYTHONPATH:$PWD
make -s -j16 build > /tmp/build.log 2>&1 || { echo "build failed"; tail -5 /tmp/build.log; }
L=build/libflashcore.so
S=fp8-s4k-causal,fp8-s4k-d256-causal,fp8-s8k-d256-causal
for r in 1 2; do echo "## run $r"; python3 bench/ab_kernels.py base=$L p25=$L@l2=25 p40=$L@l2=40 p58=$L@l2=58 p75=$L@l2=75 p83=$L@l2=83 --shapes $S --rounds 10 --flush-mib 256; done > $OUT/ab.txt 2>&1
grep -A5 "^speed vs fa3" $OUT/ab.txt; grep -c "differs\|FAIL" $OUT/ab.txt
