# step 8.43, third call: why a build that adds (mid) or drops (slim) code that never runs is 2-3 % slower at FP8 S4K
source .ab/setup.sh || exit 1
export PYTHONPATH=$PYTHONPATH:$PWD
L=$PWD/.ab/libs
for v in head ns2 slim; do
  timeout 150 ncu --clock-control none --kernel-name regex:attention_forward_wgmma --launch-skip 1 --launch-count 1 \
    --section SourceCounters --section WarpStateStats --section SpeedOfLight --section InstructionStats -o /tmp/rep-$v -f \
    python3 bench/ncu_pair.py $L/$v/libflashcore.so fp8-s4k --calls 2 > $OUT/ncu-$v.log 2>&1; echo "$v ncu rc=$?"
  ncu -i /tmp/rep-$v.ncu-rep --page source --print-source sass --csv > /tmp/sass-$v.csv 2>/dev/null
  ncu -i /tmp/rep-$v.ncu-rep --page details --csv > $OUT/details-$v.csv 2>/dev/null
  python3 bench/sass_stalls.py /tmp/sass-$v.csv > $OUT/stalls-$v.txt 2>&1
  python3 bench/sass_stalls.py /tmp/sass-$v.csv --list > $OUT/list-$v.txt 2>&1
  cut -d, -f1-3 /tmp/sass-$v.csv | head -1 > /dev/null; xz -9 -c /tmp/sass-$v.csv > $OUT/sass-$v.csv.xz
done
for v in head ns2 slim; do echo "== $v"; head -25 $OUT/stalls-$v.txt; grep -E '"Duration"|"Elapsed Cycles"|"Executed Instructions"' $OUT/details-$v.csv | cut -d, -f12-16; done
