#!/usr/bin/env bash
# (Ran with its checks spelled inline; they now go through bench/device-lib.sh: the same
# commands and logs.)
# One device call: attend's ring in chunks of CH sub-tiles of a page (QGEN_TUNE chunk=N; an
# owned cache's quantized chunk is one bulk copy of K and one of V). ncu of the q4_0 attend
# (ctas-probe-h200) put 43 % of its warp samples on the consumers' wait for a full stage and
# its producer warp busy ~93 % of the time issuing ~97 instructions a sub-tile. Checks under
# chunk=4 (qwen3-4b and the engine-layout pairs), then chunk=1 (default) / 2 / 4 alternating,
# two rounds, dense B1 128K and 1M for every cache type and q4_0 sparse at 1M; then ncu's
# stall sampling of q4_0 at 128K under chunk=4.
set -u
. bench/device-lib.sh
export QGEN_CACHE_DIR=/tmp/qgen-cache
export QGEN_TUNE=chunk=4
check_quick qwen3-chunk4 specs/qwen3-4b.lua 120
check_quick kv-pairs-chunk4 tests/gpu/kv-pairs.lua 200
for round in 1 2; do
  for ch in 1 2 4; do
    export QGEN_TUNE=chunk=$ch
    for v in q4_0 q8_0 q5_0 f16; do
      name=qwen3-4b-$v; [ $v = f16 ] && name=qwen3-4b
      cov=1; [ $v = q4_0 ] && cov=1,0.25,0.0625
      timeout 60 build-dev/qgen bench --spec specs/qwen3-4b.lua --variant $name --ctx 128K,1M --batch 1 --coverage $cov --runs 20 \
        --json $OUT/r/ab-$v-chunk$ch-$round.json > $OUT/r/ab-$v-chunk$ch-$round.log 2>&1 || echo "bench $v $ch $round failed"
    done
  done
  echo "round $round done at $(( $(date +%s) - t0 )) s"
done
python3 bench/ab_summary.py $OUT/r > $OUT/r/summary.txt 2>&1; cat $OUT/r/summary.txt
export QGEN_TUNE=chunk=4
timeout 120 ncu --clock-control none --section SourceCounters --section WarpStateStats --section SchedulerStats --section SpeedOfLight \
  --kernel-name qg_attend --launch-skip 3 --launch-count 1 -o $OUT/r/src-q4-128k-chunk4 \
  build-dev/qgen bench --spec specs/qwen3-4b.lua --variant qwen3-4b-q4_0 --ctx 128K --batch 1 --coverage 1 --runs 2 --warmup 2 > $OUT/r/ncu-run.log 2>&1
ncu --import $OUT/r/src-q4-128k-chunk4.ncu-rep --print-summary none > $OUT/r/ncu-q4-128k-chunk4.txt 2>&1
ncu --import $OUT/r/src-q4-128k-chunk4.ncu-rep --page source --csv --print-source sass > $OUT/r/ncu-src-q4-128k-chunk4-sass.csv 2>&1
echo "ncu done at $(( $(date +%s) - t0 )) s"
cd $OUT && tar czf all.tgz r
