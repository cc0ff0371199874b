# step 8.43: exponentials inside the ring's turn (bench/ring_turn.py on cuobjdump's SASS) for this and earlier A/B
# builds, then share C of make gate-phase7 (correctness, sanitizer, structure, determinism, api, random shapes, ...)
for v in head ns2 slim mid qp2 qw qp3 qs qc qn tc2 tc3; do
  cuobjdump -sass .ab/libs/$v/libflashcore.so > /tmp/$v.sass 2>/dev/null
  python3 bench/ring_turn.py /tmp/$v.sass --kernel E4m3 --kernel Li128E > $OUT/turns-$v.txt 2>&1
  echo "$v: $(grep -c 'in the turn' $OUT/turns-$v.txt) turns; inside: $(grep -o '[0-9]* MUFU.EX2 in the turn' $OUT/turns-$v.txt | cut -d' ' -f1 | tr '\n' ' ')"
done
bash .ab/g2.sh build,correctness,determinism,sanitizer,structure-tma,structure-wgmma,correctness-long,api,random-shapes,determinism-strict,determinism-gpus,integrations
