#!/usr/bin/env bash
# (Ran with its A/B bench lines spelled inline; they now go through bench/device-lib.sh's
# ab_bench and ab_summary: the same commands and files.)
# One device call (NOTES 65): (1) f16 chunks without the L2 policy (the fault's only passing
# form: chunk-fault-h200/tpl-nopol.patch, here on e6437e0's templates), A/B against the
# tree's chunk 1 with the policy: cur (templates,
# chunk 1) / np1 (tpl-nopol, chunk 1) / np4 (tpl-nopol, chunk=4: 4 where it fits), qwen3-4b f16
# and qwen2.5-0.5b dense 128K and 1M B1, two rounds, with build-exp (chunks forced by
# QGEN_TUNE); (2) ncu stall sampling (SourceCounters) of build-dev's attend, q4_0 (pairs) and
# q5_0 (no pairs) dense 128K B1: where the quantized step's time is now.
set -u
. bench/device-lib.sh
export QGEN_CACHE_DIR=/tmp/qgen-cache
for round in 1 2; do
  for tree in cur np1 np4; do
    tpl=.carry/tpl-nopol; [ $tree = cur ] && tpl=templates
    ch=1; [ $tree = np4 ] && ch=4
    for v in f16:specs/qwen3-4b.lua:qwen3-4b q05:specs/qwen2.5-0.5b.lua:qwen2.5-0.5b; do
      IFS=: read ty spec var <<< "$v"
      ab_bench $ty $tree $round build-exp/qgen $spec $var 1 QGEN_TUNE=chunk=$ch QGEN_TEMPLATE_DIR=$tpl
    done
  done
done
ab_summary
for t in q4_0 q5_0; do
  timeout 120 ncu --clock-control none --section SourceCounters --section WarpStateStats --section SchedulerStats --section SpeedOfLight \
    --kernel-name qg_attend --launch-skip 3 --launch-count 1 -o $OUT/r/src-$t-128k \
    build-dev/qgen bench --spec specs/qwen3-4b.lua --variant qwen3-4b-$t --ctx 128K --batch 1 --coverage 1 --runs 2 --warmup 2 > $OUT/r/ncu-run-$t.log 2>&1
  ncu --import $OUT/r/src-$t-128k.ncu-rep --print-summary none > $OUT/r/ncu-$t-128k.txt 2>&1
  ncu --import $OUT/r/src-$t-128k.ncu-rep --page source --csv --print-source sass > $OUT/r/ncu-src-$t-128k-sass.csv 2>&1
  python3 bench/ncu_sass_top.py $OUT/r/ncu-src-$t-128k-sass.csv 12 > $OUT/r/ncu-sass-top-$t-128k.txt 2>&1; head -3 $OUT/r/ncu-sass-top-$t-128k.txt
  echo "ncu $t $(elapsed)"
done
cd $OUT && tar czf all.tgz r
