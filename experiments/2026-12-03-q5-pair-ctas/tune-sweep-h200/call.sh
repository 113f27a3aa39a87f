#!/usr/bin/env bash
# One device call (NOTES 66): plan knobs on 453cbf7, dense B1 at 128K and 1M, two rounds.
#   q5_0: the default (one sub-tile a step, 96 registers since 26a6387), e6437e0's templates
#         (the same plan, 118 registers) and pair=1 (96 registers, no spills now);
#   q4_0: the default, chunk=2 (8 chunk stages of 2), stages=6 (24 stages; 20 spilled bytes);
#   q8_0: the default, chunk=2.
# .carry/t-e643 (ignored, carried) was made by: git archive e6437e0 templates | tar -x -C .carry/t-e643
set -u
. bench/device-lib.sh
export QGEN_CACHE_DIR=/tmp/qgen-cache
for round in 1 2; do
  for cell in q5_0:head: q5_0:e6437e0: q5_0:pair1:pair=1 q4_0:head: q4_0:chunk2:chunk=2 q4_0:stages6:stages=6 \
              q8_0:head: q8_0:chunk2:chunk=2; do
    IFS=: read -r v tree tune <<< "$cell"
    tdir=; [ $tree = e6437e0 ] && tdir=QGEN_TEMPLATE_DIR=$PWD/.carry/t-e643/templates
    ab_bench $v $tree $round build-dev/qgen specs/qwen3-4b.lua qwen3-4b-$v 1 QGEN_TUNE=$tune $tdir
  done
  echo "round $round $(elapsed)"
done
ab_summary
cd $OUT && tar czf all.tgz r
