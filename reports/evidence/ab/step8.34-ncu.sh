# base against nold (no raw V load, timing only) under ncu at FP8 B4 H16 S4K hdim 256 causal, and hdim 128 S4K causal
# (.ab/fp8_vt_fused_bounds.cuh is kernel/fp8_vt_fused.cuh at 70b83bc with reports/evidence/ab/step8.33-vt-bounds.patch applied)
source .ab/setup.sh
rm -rf /tmp/srcv && mkdir /tmp/srcv && cp -r kernel Makefile /tmp/srcv/ && cp .ab/fp8_vt_fused_bounds.cuh /tmp/srcv/kernel/fp8_vt_fused.cuh
(make -s -j4 build BUILD_DIR=/tmp/b/base > $OUT/build-base.log 2>&1 || echo "base build failed") &
(cd /tmp/srcv && make -s -j4 build BUILD_DIR=/tmp/b/nold NVCC_EXTRA="-DFLASHCORE_VT_BOUND=1" > $OUT/build-nold.log 2>&1 || echo "nold build failed") &
wait
for d in 256 128; do for v in base nold; do
  timeout 200 ncu --clock-control none --kernel-name regex:attention_forward --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section LaunchStats \
    --csv --page details /tmp/b/$v/flashcore_driver --batch 4 --heads-q 16 --heads-kv 16 --seqlen-q 4096 --seqlen-k 4096 \
    --head-dim $d --causal --dtype e4m3 --iters 2 > $OUT/ncu-d$d-$v.csv 2> $OUT/ncu-d$d-$v.err; echo "d$d $v rc=$? lines=$(wc -l < $OUT/ncu-d$d-$v.csv)"
done; done
python3 - <<'PY'
import csv, os, glob
out = os.environ["OUT"]
want = ("Duration", "DRAM Throughput", "L2 Cache Throughput", "L1/TEX Hit Rate", "L2 Hit Rate", "Memory Throughput",
        "Mem Busy", "Max Bandwidth", "Compute (SM) Throughput", "Issue Slots Busy", "Warp Cycles Per Issued Instruction",
        "L2 Compression", "Mem Pipes Busy", "DRAM Bandwidth")
for d in (256, 128):
    vals = {}
    for v in ("base", "nold"):
        p = f"{out}/ncu-d{d}-{v}.csv"
        rows = [r for r in csv.reader(open(p)) if len(r) > 14]
        if not rows: continue
        hdr = rows[0]
        iname, iunit, ival = hdr.index("Metric Name"), hdr.index("Metric Unit"), hdr.index("Metric Value")
        for r in rows[1:]:
            vals.setdefault(r[iname] + " [" + r[iunit] + "]", {})[v] = r[ival]
    print(f"== hdim {d}")
    for k, m in vals.items():
        if any(w in k for w in want) or "Stall" in k:
            print(f"{k:60s} {m.get('base','-'):>14s} {m.get('nold','-'):>14s}")
PY
