# step 8.44, fifth call: compute-sanitizer on the tail's paths (small shapes, --sm-margin so tails exist)
L=$PWD/.ab/libs; D=$L/tail/flashcore_driver
for a in "1 17 17 128 2000 --sm-margin 124" "1 33 33 200 3000 --sm-margin 124" "1 9 3 128 1500 --sm-margin 124"; do set -- $a
 for d in 64 128 256; do for t in e4m3 bf16; do for tool in memcheck racecheck synccheck initcheck; do
  timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 $D --batch $1 --heads-q $2 --heads-kv $3 --seqlen-q $4 --seqlen-k $5 --head-dim $d --dtype $t $6 $7 --check --iters 1 > /tmp/san.log 2>&1
  echo "rc=$? $tool d$d $t $a: $(grep -E 'ERROR SUMMARY|RESULT' /tmp/san.log | tr '\n' ' ' | cut -c1-160)"
 done; done; done; done > $OUT/sanitizer.txt
grep -c "^rc=0" $OUT/sanitizer.txt; grep -v "^rc=0" $OUT/sanitizer.txt | head
$D --batch 1 --heads-q 17 --heads-kv 17 --seqlen-q 128 --seqlen-k 2000 --head-dim 128 --dtype bf16 --sm-margin 124 --iters 1 --check | tail -1
