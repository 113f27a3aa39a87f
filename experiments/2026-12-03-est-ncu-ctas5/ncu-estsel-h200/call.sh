#!/usr/bin/env bash
# Device call of NOTES 71: where a sparse step's estimate and select spend their time, on
# 2437064 (8-bit bounds, the default): ncu stall sampling and sections of qg_estimate and
# qg_select in qwen3-4b-q4_0's 6.25 % step (estimate and select do not depend on the cache
# type), B1, at 1M and 128K.
set -u
. bench/device-lib.sh
sections="--section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis"
for k in qg_estimate qg_select; do
  for ctx in 1M 128K; do
    NCU_KERNEL=$k NCU_COV=0.0625 ncu_src q4_0 $ctx 90 12 $sections
  done
done
rm -f "$OUT"/r/*.ncu-rep "$OUT"/r/*.csv
cd $OUT && tar czf all.tgz r
