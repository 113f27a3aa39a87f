#!/usr/bin/env bash
# Device call A of NOTES 66 (the tree with pair_ctas: q5_0 pairs, registers for 3 CTAs an SM):
# qwen3-4b's check, the K/V pairs' check, compute-sanitizer memcheck of q5_0 (quick sizes) and
# tests/gpu-run.sh's quick specs part.
set -u
. bench/device-lib.sh
export QGEN_CACHE_DIR=/tmp/qgen-cache
check_quick qwen3 specs/qwen3-4b.lua 150
check_quick kv-pairs tests/gpu/kv-pairs.lua 160
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 build-dev/qgen check --quick --spec specs/qwen3-4b.lua \
  --variant qwen3-4b-q5_0 > "$OUT/r/memcheck-q5_0.log" 2>&1
echo "memcheck q5_0: exit $? $(pass_counts "$OUT/r/memcheck-q5_0.log") $(tail -1 "$OUT/r/memcheck-q5_0.log") $(elapsed)"
gpu_run_quick specs 200
cd $OUT && tar czf all.tgz r
