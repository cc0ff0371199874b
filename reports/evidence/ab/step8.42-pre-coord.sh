# step 8.42: the next tile's coordinates computed mid-tile by the producer (qn) against head (2ced430)
source .ab/setup.sh || exit 1
export PYTHONPATH=$PYTHONPATH:$PWD
L=$PWD/.ab/libs
D=$L/qn/flashcore_driver
for a in "4 16 16 4096 4096 --causal" "2 8 8 2048 2048 --causal --sm-margin 128" "2 32 8 1 3000" "1 4 4 4097 4097" "2 8 8 500 224 --causal"; do set -- $a
  for d in 128 256; do for t in e4m3 bf16; do $D --batch $1 --heads-q $2 --heads-kv $3 --seqlen-q $4 --seqlen-k $5 --head-dim $d --dtype $t $6 $7 $8 --check --iters 1 | grep RESULT | cut -c1-48 | sed "s/^/qn d$d $t $a: /"; done; done
done > $OUT/checks.txt 2>&1
timeout 120 compute-sanitizer --tool racecheck --error-exitcode 9 $D --batch 1 --heads-q 4 --heads-kv 4 --seqlen-q 1024 --seqlen-k 1024 --head-dim 128 --dtype e4m3 --causal --sm-margin 130 --iters 1 > /tmp/san.txt 2>&1; echo "qn racecheck rc=$?" >> $OUT/checks.txt
timeout 120 compute-sanitizer --tool synccheck --error-exitcode 9 $D --batch 1 --heads-q 4 --heads-kv 4 --seqlen-q 1024 --seqlen-k 1024 --head-dim 128 --dtype e4m3 --sm-margin 130 --iters 1 > /tmp/san.txt 2>&1; echo "qn synccheck rc=$?" >> $OUT/checks.txt
grep -v "status=ok" $OUT/checks.txt; grep -c "status=ok" $OUT/checks.txt
FLASHCORE_LIB=$L/tlqn/libflashcore.so python3 bench/tile_timeline.py --shapes fp8-s4k,fp8-s4k-causal --flush-mib 256 > $OUT/tl.txt 2>&1
grep -E "^fp8|warpgroup [01] \(steps\)" $OUT/tl.txt
S=fp8-s4k,fp8-s4k-causal,fp8-s8k,fp8-s8k-causal,fp8-gqa-causal,fp8-s4k-d256-causal,d128,s2k-causal
python3 bench/ab_kernels.py head=$L/head/libflashcore.so qn=$L/qn/libflashcore.so --shapes $S --rounds 10 --flush-mib 256 > $OUT/ab.txt 2>&1
python3 bench/ab_kernels.py head=$L/head/libflashcore.so qn=$L/qn/libflashcore.so --shapes $S --rounds 10 --flush-mib 256 > $OUT/ab2.txt 2>&1
sed -n '/^speed vs fa3/,$p' $OUT/ab.txt; sed -n '/^speed vs fa3/,$p' $OUT/ab2.txt; grep -c differs $OUT/ab.txt
