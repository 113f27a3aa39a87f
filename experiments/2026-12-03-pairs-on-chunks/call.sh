#!/usr/bin/env bash
# (Ran with its A/B bench lines spelled inline; they now go through bench/device-lib.sh's
# ab_bench and ab_summary: the same commands and files.)
# One device call (NOTES 64): two sub-tiles a consumer step (plan pair; QGEN_TUNE pair=0|1)
# on the chunked ring. Checks under the new default (pairs on where the swapped operands are):
# qwen3-4b and the engine-layout / shape pairs (head_dim 64-256, groups 1-9; tests/gpu-run.sh's
# parts ran in the next call, chunk-fault-h200). The A/B, two rounds: pair0 / pair1, and for
# q5_0 (which spills 24 bytes at 96 registers under pairs) pair=0 at 4 CTAs too; dense B1 at
# 128K and 1M for q4_0, q8_0, q5_0, and q4_0 sparse at 128K and 1M.
set -u
. bench/device-lib.sh
export QGEN_CACHE_DIR=/tmp/qgen-cache
check_quick qwen3 specs/qwen3-4b.lua 120
check_quick kv-pairs tests/gpu/kv-pairs.lua 200
for round in 1 2; do
  for tree in pair0 pair1 pair0ctas4; do
    case $tree in pair0) tune=pair=0 ;; pair1) tune=pair=1 ;; pair0ctas4) tune=pair=0,ctas=4 ;; esac
    for v in q4_0 q8_0 q5_0; do
      [ $tree = pair0ctas4 ] && [ $v != q5_0 ] && continue
      cov=1; [ $v = q4_0 ] && cov=1,0.25,0.0625
      ab_bench $v $tree $round build-dev/qgen specs/qwen3-4b.lua qwen3-4b-$v $cov QGEN_TUNE=$tune
    done
  done
  echo "round $round $(elapsed)"
done
ab_summary
cd $OUT && tar czf all.tgz r
