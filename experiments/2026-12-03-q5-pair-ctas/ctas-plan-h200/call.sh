#!/usr/bin/env bash
# One device call (NOTES 66): registers for 3 CTAs an SM where the ring's shared memory or the
# measured speed says 3, on 453cbf7; dense at 128K and 1M, B1 and B4, two rounds.
#   q5_0: the default (96 registers, 4 CTAs), ctas=3 (120), pair=1,ctas=3 (120);
#   q8_0: the default (96 registers, but 74 KiB of ring: 3 CTAs fit), ctas=3 (128),
#         stages=3 (a ring of 12: 56 KiB, 4 CTAs fit);
#   q4_0: the default (96, 4 CTAs), ctas=3 (124).
set -u
. bench/device-lib.sh
export QGEN_CACHE_DIR=/tmp/qgen-cache AB_BATCH=1,4
for round in 1 2; do
  for cell in q5_0:head: q5_0:ctas3:ctas=3 q5_0:pair1ctas3:pair=1,ctas=3 q8_0:head: q8_0:ctas3:ctas=3 \
              q8_0:stages3:stages=3 q4_0:head: q4_0:ctas3:ctas=3; do
    IFS=: read -r v tree tune <<< "$cell"
    ab_bench $v $tree $round build-dev/qgen specs/qwen3-4b.lua qwen3-4b-$v 1 QGEN_TUNE=$tune
  done
  echo "round $round $(elapsed)"
done
ab_summary
cd $OUT && tar czf all.tgz r
