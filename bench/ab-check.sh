#!/usr/bin/env bash
# ab-check.sh HEAD_QGEN "TYPE:SPEC:VARIANT ..." "PART ...": one device call (from the
# repository root, OUT set, build-dev and HEAD_QGEN carried): the same-call A/B of HEAD_QGEN
# against build-dev/qgen over the cell sets at 25 % and 6.25 % (device-lib.sh's ab_trees),
# then qwen3-4b's check, compute-sanitizer memcheck of its q4_0 variant and the quick PARTs
# of tests/gpu-run.sh; everything into $OUT/all.tgz.
set -u
. bench/device-lib.sh
export QGEN_CACHE_DIR=/tmp/qgen-cache
ab_trees "head:$1 new:build-dev/qgen" "$2" "0.25 0.0625"
check_quick qwen3 specs/qwen3-4b.lua 120
memcheck_quick q4_0 120
for part in $3; do gpu_run_quick "$part" "$([ "$part" = paths ] && echo 200 || echo 150)"; done
cd "$OUT" && tar czf all.tgz r
