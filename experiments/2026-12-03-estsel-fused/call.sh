#!/usr/bin/env bash
# Device call of NOTES 73 (estimate's last CTA of a list selects it: no select launch where
# every list fits 128 threads x 16 keys): the same-call A/B of HEAD's qgen (.carry/qgen-head,
# db997b4) against the tree (build-dev), qwen3-4b's check and memcheck of its q4_0 variant
# (bench/ab-check.sh), then racecheck of qwen3-4b's f16 variant (the fused select's shared
# memory) and where estimate's local-memory accesses sit in its SASS (.carry/est-sm90.cubin).
set -u
bash bench/ab-check.sh .carry/qgen-head "f16i8:specs/qwen3-4b.lua:qwen3-4b q4_0i8:specs/qwen3-4b.lua:qwen3-4b-q4_0" ""
. bench/device-lib.sh
timeout 150 compute-sanitizer --tool racecheck build-dev/qgen check --quick --spec specs/qwen3-4b.lua --variant qwen3-4b \
  > "$OUT/r/racecheck-f16.log" 2>&1
echo "racecheck: exit $? $(grep -E 'RACECHECK SUMMARY|checks passed' "$OUT/r/racecheck-f16.log" | tr '\n' ' ') $(elapsed)"
cuobjdump -sass -fun qg_estimate .carry/est-sm90.cubin > "$OUT/r/est-sass.txt" 2>&1
grep -n -E 'STL|LDL' "$OUT/r/est-sass.txt" | head; grep -c '' "$OUT/r/est-sass.txt"
cd "$OUT" && tar czf all.tgz r
