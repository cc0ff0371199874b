# step 8.44: spill sites, hot-loop turns, checks and the A/B of the stream-K tail
source .ab/setup.sh || exit 1
export PYTHONPATH=$PYTHONPATH:$PWD
L=$PWD/.ab/libs
for v in head tail; do
  (cd /tmp && rm -f *.cubin && cuobjdump -xelf all $L/$v/libflashcore.so > /dev/null && for c in /tmp/*.cubin; do nvdisasm -g -c $c; done) > $OUT/$v.lines 2>&1
  python3 .ab/spills.py E4m3 Li256 < $OUT/$v.lines > $OUT/spills-$v-fp8d256.txt
  python3 .ab/spills.py E4m3 Li64E < $OUT/$v.lines > $OUT/spills-$v-fp8d64.txt
  cuobjdump -sass $L/$v/libflashcore.so > /tmp/$v.sass; python3 bench/ring_turn.py /tmp/$v.sass --kernel E4m3 --kernel Li128E > $OUT/turn-$v.txt 2>&1
  rm -f $OUT/$v.lines
done
head -c 3000 $OUT/spills-tail-fp8d256.txt; echo; head -c 1200 $OUT/spills-head-fp8d256.txt; echo
md5sum $OUT/turn-*.txt; diff $OUT/turn-head.txt $OUT/turn-tail.txt | head -10
D=$L/tail/flashcore_driver
for a in "4 16 16 4096 4096" "4 16 16 8192 8192" "3 7 7 4097 4097" "3 16 16 3000 3000" "2 32 8 4096 4096" "4 16 16 4096 4096 --sm-margin 7" "4 16 16 4096 4096 --deterministic --sm-margin 20" "2 16 16 4096 1500" "4 16 16 4096 4096 --fault 3"; do set -- $a
  for d in 64 128 256; do for t in e4m3 bf16 fp16; do timeout 60 $D --batch $1 --heads-q $2 --heads-kv $3 --seqlen-q $4 --seqlen-k $5 --head-dim $d --dtype $t $6 $7 $8 $9 --check --iters 1 2>&1 | grep -E "RESULT|rror" | cut -c1-90 | sed "s/^/d$d $t $a: /"; done; done
done > $OUT/checks.txt 2>&1
grep -v "status=ok" $OUT/checks.txt | head -12; grep -c "status=ok" $OUT/checks.txt
S=fp8-s4k,fp8-s8k,fp8-s4k-d256,fp8-s8k-d256,fp8-s4k-causal,fp8-s8k-causal,d128
for r in 1 2; do
python3 bench/ab_kernels.py head=$L/head/libflashcore.so tail=$L/tail/libflashcore.so whole=$L/tail/libflashcore.so@schedule=3 --shapes $S --rounds 10 --flush-mib 256 > $OUT/ab$r.txt 2>&1
sed -n '/^speed vs fa3/,/geomean/p' $OUT/ab$r.txt; grep -i "differ\|error\|fail" $OUT/ab$r.txt | head -5; done
