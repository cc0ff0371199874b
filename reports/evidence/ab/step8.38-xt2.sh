# step 8.38 second call: Q halves alone (qs) against base and xt
source .ab/setup.sh || exit 1
export PYTHONPATH=$PYTHONPATH:$PWD
b() { make -s -j5 build BUILD_DIR=/tmp/b/$1 NVCC_EXTRA="$2" > /tmp/build-$1.log 2>&1 || { echo "build $1 failed"; tail -5 /tmp/build-$1.log; }; }
b base "" & b xt "-DFLASHCORE_FP8_D128_CROSS_TILE=1" & b qs "-DFLASHCORE_FP8_D128_CROSS_TILE=1 -DFLASHCORE_XT_NO_ISSUE" & wait
S=fp8-s4k,fp8-s4k-causal,fp8-s4k-k1088,fp8-s8k-causal
python3 bench/ab_kernels.py base=/tmp/b/base/libflashcore.so xt=/tmp/b/xt/libflashcore.so qs=/tmp/b/qs/libflashcore.so --shapes $S --rounds 10 --flush-mib 256 > $OUT/ab.txt 2>&1
sed -n '/^summary/,$p' $OUT/ab.txt; grep -c differs $OUT/ab.txt
