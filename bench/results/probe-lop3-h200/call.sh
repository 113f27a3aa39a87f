#!/usr/bin/env bash
# (Ran with its checks spelled inline; they now go through bench/device-lib.sh: the same
# commands and logs.)
# (Run as bench/results/final-749fa0d-h200/call.sh; its outputs then moved: the probe here,
# the gpu-run logs to tests/gpu-results/gpu-check-{specs,paths}-quick-749fa0d-h200.log, ncu to
# bench/ncu/ncu-attend-q4-128k-749fa0d.txt.)
# One device call on 749fa0d (build-dev built here and carried): the GPU test run's quick
# specs and paths parts, ncu's warp-state / scheduler / memory sections of the q4_0 attend at
# 128K B1, and, if the call has time left, the probe grid with the peers and targets.py.
set -u
. bench/device-lib.sh
for p in specs paths; do
  gpu_run_quick $p 600
done
export QGEN_CACHE_DIR=/tmp/qgen-cache
timeout 120 ncu --clock-control none --section SpeedOfLight --section Occupancy --section SchedulerStats --section WarpStateStats --section MemoryWorkloadAnalysis \
  --kernel-name qg_attend --launch-skip 3 --launch-count 1 build-dev/qgen bench --spec specs/qwen3-4b.lua --variant qwen3-4b-q4_0 --ctx 128K --batch 1 --coverage 1 --runs 2 --warmup 2 > $OUT/r/ncu-attend-q4-128k-749fa0d.txt 2>&1
echo "ncu: rc $?"
probe_if_time 560
cd $OUT && tar czf all.tgz r
