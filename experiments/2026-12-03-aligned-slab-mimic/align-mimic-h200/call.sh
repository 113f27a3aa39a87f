#!/usr/bin/env bash
# One device call (NOTES 67): what a repacked quantized slab would buy, timed before building
# it. tpl-align.patch (applied to 6ea8819's templates in .carry/t-align) gives the consumers
# the loads such a layout would take, on the present bytes (so its outputs are wrong; timing
# only): every 4-byte quant load one aligned 32-bit load (no 16-bit pairs + PRMT), V's row
# pair one 32-bit load, K's four block scales of a row one 8-byte load. Same-call A/B against
# the tree's own templates, dense 128K and 1M, B1 and B4, two rounds.
set -u
. bench/device-lib.sh
export QGEN_CACHE_DIR=/tmp/qgen-cache AB_BATCH=1,4
for round in 1 2; do
  for v in q4_0 q5_0 q8_0; do
    ab_bench $v head $round build-dev/qgen specs/qwen3-4b.lua qwen3-4b-$v 1
    ab_bench $v align $round build-dev/qgen specs/qwen3-4b.lua qwen3-4b-$v 1 QGEN_TEMPLATE_DIR=$PWD/.carry/t-align/templates
  done
  echo "round $round $(elapsed)"
done
ab_summary
cd $OUT && tar czf all.tgz r
