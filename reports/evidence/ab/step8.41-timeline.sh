# the tile timeline of 2ced430's kernel (instrumented build), FP8 hdim 128 S4K and S4K causal, hdim 256 S4K causal
source .ab/setup.sh || exit 1
export PYTHONPATH=$PYTHONPATH:$PWD
FLASHCORE_LIB=$PWD/.ab/libs/tl/libflashcore.so python3 bench/tile_timeline.py --shapes fp8-s4k,fp8-s4k-causal,fp8-d256-s4k-causal --flush-mib 256 > $OUT/tl.txt 2>&1
cat $OUT/tl.txt
