#!/usr/bin/env bash
# One device call (NOTES 66, for the next change): ncu stall sampling (SourceCounters) and
# the scheduler/warp-state sections of 6ea8819's paired attend, q4_0 (4 CTAs an SM) and q5_0
# (3), dense 1M B1: the steady state, without 128K's fill and merge.
set -u
. bench/device-lib.sh
export QGEN_CACHE_DIR=/tmp/qgen-cache
for t in q4_0 q5_0; do
  timeout 200 ncu --clock-control none --section SourceCounters --section WarpStateStats --section SchedulerStats --section SpeedOfLight \
    --section Occupancy --kernel-name qg_attend --launch-skip 3 --launch-count 1 -o $OUT/r/src-$t-1m \
    build-dev/qgen bench --spec specs/qwen3-4b.lua --variant qwen3-4b-$t --ctx 1M --batch 1 --coverage 1 --runs 2 --warmup 2 > $OUT/r/ncu-run-$t.log 2>&1
  ncu --import $OUT/r/src-$t-1m.ncu-rep --print-summary none > $OUT/r/ncu-$t-1m.txt 2>&1
  ncu --import $OUT/r/src-$t-1m.ncu-rep --page source --csv --print-source sass > $OUT/r/ncu-src-$t-1m-sass.csv 2>&1
  python3 bench/ncu_sass_top.py $OUT/r/ncu-src-$t-1m-sass.csv 16 > $OUT/r/ncu-sass-top-$t-1m.txt 2>&1; head -3 $OUT/r/ncu-sass-top-$t-1m.txt
  echo "ncu $t $(elapsed)"
done
rm -f $OUT/r/*.ncu-rep
cd $OUT && tar czf all.tgz r
