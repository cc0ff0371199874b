# step 8.41, second call: qw (a wait for the next tile's index after V(0), no prefetch) and qp3 (the prefetch after
# the tile's last V load) against head
source .ab/setup.sh || exit 1
export PYTHONPATH=$PYTHONPATH:$PWD
L=$PWD/.ab/libs
for v in qp3 qw; do D=$L/$v/flashcore_driver
  for a in "4 16 16 4096 4096 --causal" "2 32 8 1 3000" "1 4 4 4097 4097" "2 8 8 500 224 --causal"; do set -- $a
    $D --batch $1 --heads-q $2 --heads-kv $3 --seqlen-q $4 --seqlen-k $5 --head-dim 128 --dtype e4m3 $6 $7 $8 --check --iters 1 | grep RESULT | cut -c1-48 | sed "s/^/$v $a: /"
  done
done > $OUT/checks.txt 2>&1; cat $OUT/checks.txt
S=fp8-s4k,fp8-s4k-causal,fp8-s8k-causal,fp8-gqa-causal
python3 bench/ab_kernels.py head=$L/head/libflashcore.so qw=$L/qw/libflashcore.so qp3=$L/qp3/libflashcore.so --shapes $S --rounds 10 --flush-mib 256 > $OUT/ab.txt 2>&1
python3 bench/ab_kernels.py head=$L/head/libflashcore.so qw=$L/qw/libflashcore.so qp3=$L/qp3/libflashcore.so --shapes $S --rounds 10 --flush-mib 256 > $OUT/ab2.txt 2>&1
sed -n '/^speed vs fa3/,$p' $OUT/ab.txt; sed -n '/^speed vs fa3/,$p' $OUT/ab2.txt
