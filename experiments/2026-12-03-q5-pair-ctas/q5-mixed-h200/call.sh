#!/usr/bin/env bash
# (Ran with its A/B loop spelled inline; it now goes through bench/device-lib.sh's ab_rounds:
# the same commands and files.)
# One device call (NOTES 66's change on the mixed pairs): q5_0 with q8_0 / q4_0 as the other
# of K and V (tests/gpu/kv-pairs.lua: head_dim 128, group 4, 2 KV heads), now paired with
# registers for 3 CTAs an SM, against pair=0 (the previous default: one sub-tile a step,
# registers left to ptxas); dense B1 at 128K and 1M, two rounds.
set -u
. bench/device-lib.sh
export QGEN_CACHE_DIR=/tmp/qgen-cache
kv=tests/gpu/kv-pairs.lua
ab_rounds build-dev/qgen "new= old=pair=0" \
  "q8q5:$kv:pair-q8_0-q5_0 q5q8:$kv:pair-q5_0-q8_0 q4q5:$kv:pair-q4_0-q5_0 q5q4:$kv:pair-q5_0-q4_0"
ab_summary
cd $OUT && tar czf all.tgz r
