#!/usr/bin/env bash
# One device call (NOTES 66's change on the mixed pairs): q5_0 with q8_0 / q4_0 as the other
# of K and V (tests/gpu/kv-pairs.lua: head_dim 128, group 4, 2 KV heads), now paired with
# registers for 3 CTAs an SM, against pair=0 (the previous default: one sub-tile a step,
# registers left to ptxas); dense B1 at 128K and 1M, two rounds.
set -u
. bench/device-lib.sh
export QGEN_CACHE_DIR=/tmp/qgen-cache
for round in 1 2; do
  for tree in new old; do
    tune=; [ $tree = old ] && tune=pair=0
    for v in q8q5:pair-q8_0-q5_0 q5q8:pair-q5_0-q8_0 q4q5:pair-q4_0-q5_0 q5q4:pair-q5_0-q4_0; do
      ab_bench ${v%%:*} $tree $round build-dev/qgen tests/gpu/kv-pairs.lua ${v#*:} 1 QGEN_TUNE=$tune
    done
  done
  echo "round $round $(elapsed)"
done
ab_summary
cd $OUT && tar czf all.tgz r
