#!/usr/bin/env bash
# (The files it wrote were renamed on commit: "=" and "," dropped from tune-*.json/.log; its
# "default" carried an explicit launch-bounds minimum of 1 CTA, 121 registers: see NOTES 63.)
# One device call: is the block-quantized (swapped) attend held by its warps an SM (NOTES 62:
# 3 CTAs an SM 12-20 % slower than 4; ring depth no effect)? At ptxas's 96 registers only 20
# warps fit an SM (5 a scheduler). QGEN_TUNE ctas=N sizes the registers for N CTAs (80 a
# thread: 6 warps a scheduler): groups x ctas = 3 x 6, 5 x 4, 7 x 3 against the default 4 x 4
# (96 registers), q4_0 / q8_0 / q5_0 dense B1 at 128K and 1M, two alternating rounds. Then
# ncu's per-instruction stall sampling of the default q4_0 attend at 128K (owed by NOTES 62).
set -u
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/r/gpu.txt
export QGEN_CACHE_DIR=/tmp/qgen-cache
t0=$(date +%s)
for round in 1 2; do
  for tune in default groups=4,ctas=4 groups=3,ctas=6 groups=3,ctas=6,stages=2 groups=5,ctas=4,stages=2 groups=7,ctas=3,stages=2; do
    if [ $tune = default ]; then unset QGEN_TUNE; else export QGEN_TUNE=$tune; fi
    for v in q4_0 q8_0 q5_0; do
      timeout 40 build-dev/qgen bench --spec specs/qwen3-4b.lua --variant qwen3-4b-$v --ctx 128K,1M --batch 1 --coverage 1 --runs 20 \
        --json $OUT/r/tune-$v-$tune-$round.json > $OUT/r/tune-$v-$tune-$round.log 2>&1 || echo "bench $v $tune $round failed"
    done
  done
  echo "round $round done at $(( $(date +%s) - t0 )) s"
done
unset QGEN_TUNE
python3 - $OUT/r <<'PY' | tee $OUT/r/summary.txt
import glob, json, os, sys, collections
d = collections.defaultdict(list)
for f in sorted(glob.glob(os.path.join(sys.argv[1], "tune-*.json"))):
    v, rest = os.path.basename(f)[5:-5].split("-", 1)
    tune = rest.rsplit("-", 1)[0]
    for r in json.load(open(f)): d[(v, r["ctx"], tune)].append(r["attend_us"])
for k in sorted(d): print(f"{k[0]} dense B1 ctx {k[1]:>8} {k[2]:24} attend us " + " / ".join(f"{x:.1f}" for x in d[k]))
PY
timeout 150 ncu --clock-control none --section SourceCounters --section WarpStateStats --section SchedulerStats \
  --section MemoryWorkloadAnalysis_Tables --kernel-name qg_attend --launch-skip 3 --launch-count 1 -o $OUT/r/src-q4-128k \
  build-dev/qgen bench --spec specs/qwen3-4b.lua --variant qwen3-4b-q4_0 --ctx 128K --batch 1 --coverage 1 --runs 2 --warmup 2 > $OUT/r/ncu-run.log 2>&1
ncu --import $OUT/r/src-q4-128k.ncu-rep --print-summary none > $OUT/r/ncu-src-q4-128k.txt 2>&1
ncu --import $OUT/r/src-q4-128k.ncu-rep --page source --csv --print-source sass > $OUT/r/ncu-src-q4-128k-sass.csv 2>&1
echo "ncu done at $(( $(date +%s) - t0 )) s"
cd $OUT && tar czf all.tgz r
