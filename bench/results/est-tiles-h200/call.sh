#!/usr/bin/env bash
# Device call of NOTES 70 (estimate: two tiles of 16 pages a warp a round over 8-bit rows, at
# three CTAs an SM; the tree = fad3f27 + est-tiles.patch, rebuilt after the revert from the same
# edits without their comments):
# the same-call A/B of fad3f27 (.carry/qgen-head, its build's qgen) against
# the tree (build-dev), sparse 25 % and 6.25 %, 128K and 1M, B1, two rounds, on qwen3-4b
# (f16 cache, 8-bit bounds), its q4_0 variant, and the f16-bounds twin of
# tests/gpu/bounds-i8.lua (whose estimate should not move); then qwen3-4b's check,
# compute-sanitizer memcheck of its q4_0 variant, and tests/gpu-run.sh's quick specs and paths.
set -u
. bench/device-lib.sh
export QGEN_CACHE_DIR=/tmp/qgen-cache
for round in 1 2; do
  for tree in head:.carry/qgen-head new:build-dev/qgen; do
    for cov in 0.25 0.0625; do
      ab_bench "f16i8c${cov#0.}" "${tree%%:*}" $round "${tree#*:}" specs/qwen3-4b.lua qwen3-4b $cov
      ab_bench "q4_0i8c${cov#0.}" "${tree%%:*}" $round "${tree#*:}" specs/qwen3-4b.lua qwen3-4b-q4_0 $cov
      ab_bench "f16f16c${cov#0.}" "${tree%%:*}" $round "${tree#*:}" tests/gpu/bounds-i8.lua qwen3-4b-f16-bounds-f16 $cov
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
gpu_run_quick paths 200
cd $OUT && tar czf all.tgz r
