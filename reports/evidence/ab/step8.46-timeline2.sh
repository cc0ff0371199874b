# step 8.46 follow-up: raw stamps of 8c0c1a7's timeline build (the causal step by tile length and by tile index)
source .ab/setup.sh || exit 1
export PYTHONPATH=$PYTHONPATH:$PWD
FLASHCORE_LIB=$PWD/.ab/libs/tl/libflashcore.so python3 bench/tile_timeline.py --shapes fp8-s4k-causal,fp8-s4k --flush-mib 256 --out $OUT/stamps > $OUT/timeline.txt 2>&1
grep -E "fixed|step by" $OUT/timeline.txt | cut -c1-300; ls -la $OUT/stamps
