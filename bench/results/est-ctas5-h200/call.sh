#!/usr/bin/env bash
# Device call of NOTES 71 (estimate over 8-bit rows at five CTAs an SM, Q's fragments from
# shared memory): the same-call A/B of fad3f27's qgen (.carry/qgen-head; its kernels are
# 2437064's) against the tree (build-dev), as est-tiles-h200's, then qwen3-4b's check,
# compute-sanitizer memcheck of its q4_0 variant and tests/gpu-run.sh's quick specs part.
set -u
. bench/device-lib.sh
export QGEN_CACHE_DIR=/tmp/qgen-cache
for round in 1 2; do
  for tree in head:.carry/qgen-head new:build-dev/qgen; do
    for cov in 0.25 0.0625; do
      ab_bench "f16i8c${cov#0.}" "${tree%%:*}" $round "${tree#*:}" specs/qwen3-4b.lua qwen3-4b $cov
      ab_bench "q4_0i8c${cov#0.}" "${tree%%:*}" $round "${tree#*:}" specs/qwen3-4b.lua qwen3-4b-q4_0 $cov
    done
  done
  echo "round $round $(elapsed)"
done
ab_summary
check_quick qwen3 specs/qwen3-4b.lua 120
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 build-dev/qgen check --quick --spec specs/qwen3-4b.lua \
  --variant qwen3-4b-q4_0 > "$OUT/r/memcheck-q4_0.log" 2>&1
echo "memcheck q4_0: exit $? $(pass_counts "$OUT/r/memcheck-q4_0.log") $(tail -1 "$OUT/r/memcheck-q4_0.log") $(elapsed)"
gpu_run_quick specs 150
cd $OUT && tar czf all.tgz r
