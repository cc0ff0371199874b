# step 8.35 diagnostics: block-line builds (base, nold, nost) made here from patched copies, then bench/block_timeline.py
source .ab/setup.sh || exit 1
export PYTHONPATH=$PWD:$PYTHONPATH
R=$PWD
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader
mk() { local n=$1; shift; rm -rf /tmp/src/$n; mkdir -p /tmp/src/$n; cp -r kernel Makefile /tmp/src/$n/
  (cd /tmp/src/$n && patch -p1 -s < $R/reports/evidence/ab/step8.35-blockline.patch && for f in "$@"; do patch -p1 -s < $R/$f; done) || echo "patch $n failed"; }
b() { make -s -j6 -C /tmp/src/$1 build BUILD_DIR=/tmp/b/$1 NVCC_EXTRA="-DFLASHCORE_BLOCKLINE $2" > $OUT/build-$1.log 2>&1 || { echo "build $1 failed"; tail -5 $OUT/build-$1.log; }; }
mk base; mk nold reports/evidence/ab/step8.33-vt-bounds.patch; mk nost reports/evidence/ab/step8.33-vt-bounds.patch
b base "" & b nold "-DFLASHCORE_VT_BOUND=1" & b nost "-DFLASHCORE_VT_BOUND=2" & wait
ls -la /tmp/b/*/libflashcore.so | cut -c30-
S=fp8-s4k-causal,fp8-s4k,fp8-d256-s4k-causal,fp8-d256-s4k,bf16-s4k-causal
for r in 1 2; do for x in base nold nost; do echo "## run $r build $x"; FLASHCORE_LIB=/tmp/b/$x/libflashcore.so python3 bench/block_timeline.py --shapes $S --flush-mib 256 --out $OUT/pt-$x-$r; done; done > $OUT/bl.txt 2>&1
cat $OUT/bl.txt | cut -c1-260
