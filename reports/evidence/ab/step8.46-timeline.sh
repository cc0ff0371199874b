# step 8.46: tile timelines (instrumented builds, -DFLASHCORE_TIMELINE) of 365065b (head) and 8c0c1a7 (fast division)
source .ab/setup.sh || exit 1
export PYTHONPATH=$PYTHONPATH:$PWD
L=$PWD/.ab/libs
for b in tlh tl; do
  FLASHCORE_LIB=$L/$b/libflashcore.so python3 bench/tile_timeline.py --shapes fp8-s4k,fp8-s4k-causal --flush-mib 256 > $OUT/timeline-$b.txt 2>&1
  echo "== $b"; grep -iE "fixed|q wait|step|epilogue|first|latency" $OUT/timeline-$b.txt | head -40
done
