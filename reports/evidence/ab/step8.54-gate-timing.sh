# step 8.54 follow-up: perf-fp8 (the gate's own timing) on 12bcf1e's library (head) and 36a3bf8's (new), ABABAB
source .ab/setup.sh || exit 1
make -s build > $OUT/build.log 2>&1 || { tail $OUT/build.log; exit 1; }
for r in 1 2 3; do for b in head new; do
  if [ $b = head ]; then export FLASHCORE_LIB=$PWD/.ab/libs/h12/libflashcore.so; else export FLASHCORE_LIB=$PWD/build/libflashcore.so; fi
  rm -rf /tmp/g; make gate-phase7 GATE_ARGS="--only perf-fp8 --out /tmp/g --no-history" > $OUT/$b$r.log 2>&1
  cp /tmp/g/results.json $OUT/$b$r.json
  python3 - $OUT/$b$r.json $b$r <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
g = [g for g in d["gates"] if g["name"] == "perf-fp8"][0]
cells = []
for w in g["details"]["workloads"]:
    rows = {r["backend"]: r for r in w["rows"]}
    k = rows["flashcore"]["kernels"][0][:12]
    cells.append(f"{w['name'].replace('fp8-', '')} {rows['fa3']['ours_speedup']:.4f}")
print(sys.argv[2], k, " | ".join(cells))
PY
done; done
