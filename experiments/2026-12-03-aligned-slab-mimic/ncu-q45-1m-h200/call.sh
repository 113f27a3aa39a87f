#!/usr/bin/env bash
# (Ran with its ncu steps spelled inline; they now go through bench/device-lib.sh's ncu_src:
# the same commands and files.)
# One device call (NOTES 66, for the next change): ncu stall sampling (SourceCounters) and
# the scheduler/warp-state sections of 6ea8819's paired attend, q4_0 (4 CTAs an SM) and q5_0
# (3), dense 1M B1: the steady state, without 128K's fill and merge.
set -u
. bench/device-lib.sh
export QGEN_CACHE_DIR=/tmp/qgen-cache
for t in q4_0 q5_0; do ncu_src $t 1M 200 16 --section Occupancy; done
rm -f $OUT/r/*.ncu-rep
cd $OUT && tar czf all.tgz r
