#!/usr/bin/env bash
# Device call B of NOTES 66: tests/gpu-run.sh's quick paths part; the same-call A/B of q5_0
# (the new default: pairs at 3 CTAs an SM, against pair=0: the previous plan, registers left
# to ptxas: 96), dense B1 and B4 at 128K and 1M, two rounds; then the probe grid.
set -u
. bench/device-lib.sh
export QGEN_CACHE_DIR=/tmp/qgen-cache
gpu_run_quick paths 200
for round in 1 2; do
  for cell in q5_0:new: q5_0:old:pair=0; do
    IFS=: read -r v tree tune <<< "$cell"
    AB_BATCH=1,4 ab_bench $v $tree $round build-dev/qgen specs/qwen3-4b.lua qwen3-4b-$v 1 QGEN_TUNE=$tune
  done
done
ab_summary
probe_if_time 560
cd $OUT && tar czf all.tgz r
