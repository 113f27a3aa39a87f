#!/usr/bin/env bash
# Device call A of NOTES 69 (8-bit bounds the default; views keep them): qwen3-4b's check
# (its views now of 8-bit bounds: pages of the block by their 8-bit rows, half-block pages by
# f16 bounds), tests/gpu-run.sh's quick specs and paths parts, and the Python suites that
# open views and engine pools on the device.
set -u
. bench/device-lib.sh
export QGEN_CACHE_DIR=/tmp/qgen-cache
check_quick qwen3 specs/qwen3-4b.lua 150
gpu_run_quick specs 200
gpu_run_quick paths 220
(cd python && QGEN_LIBRARY=$PWD/../build-dev/libqgen.so timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_views_gpu.py \
  tests/test_transformers_cb.py tests/test_gpu.py > "$OUT/r/pytest-views-cb-gpu.log" 2>&1)
echo "pytest: exit $? $(tail -1 "$OUT/r/pytest-views-cb-gpu.log") $(elapsed)"
cd $OUT && tar czf all.tgz r
