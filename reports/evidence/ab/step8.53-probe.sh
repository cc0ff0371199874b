# step 8.53 follow-up: perf-fp8 on e099ab7's library with the clock probe (300 us spin before each call, as gated) and
# without it (gates/bench.yaml timing.clock_probe_us 0, edited on the device copy only), alternating
source .ab/setup.sh || exit 1
make -s build > $OUT/build.log 2>&1 || { tail $OUT/build.log; exit 1; }
cp gates/bench.yaml /tmp/bench.yaml.orig
for r in 1 2; do for b in probe noprobe; do
  cp /tmp/bench.yaml.orig gates/bench.yaml
  [ $b = noprobe ] && sed -i 's/^\(  clock_probe_us:\) *[0-9.]*/\1 0/' gates/bench.yaml
  grep -n "^  clock_probe_us" gates/bench.yaml | head -1 > $OUT/$b$r.setting
  rm -rf /tmp/g; make gate-phase7 GATE_ARGS="--only perf-fp8 --out /tmp/g --no-history" > $OUT/$b$r.log 2>&1
  cp /tmp/g/results.json $OUT/$b$r.json
  python3 - $OUT/$b$r.json "$b$r $(cat $OUT/$b$r.setting)" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
g = [g for g in d["gates"] if g["name"] == "perf-fp8"][0]
print(sys.argv[2], " | ".join(f"{c['workload'].replace('fp8-', '')} {c['measured']:.4f}" for c in g["checks"]
                             if c["metric"] == "speed_vs_fa3"))
PY
done; done
cp /tmp/bench.yaml.orig gates/bench.yaml
