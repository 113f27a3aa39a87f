#!/usr/bin/env bash
# rescore-grid.sh — the two-stage selection quality grid on the GPU (which r keeps the oracle's pages):
# tests/gpu/rescore.lua's Qwen3-4B variants (f16 cache with its q4_0 sketch, q4_0 cache
# rescoring its own K; r = 1 is Quest, r = 2, 4, 8, 16 two-stage) x coverage 25 / 12.5 /
# 6.25 % x the four tasks x 50 trials x needle margins 0-6, Quest's and the oracle's lists
# per variant, no output errors (--ref-ctx -1). In parts, one (context, cache type) each, so
# each fits one device call; every part logs its own time:
#   bash bench/rescore-grid.sh BUILD_DIR OUT_DIR PART [MARGINS]
#   PART: 16K-f16 16K-q4_0 64K-f16 64K-q4_0 256K-f16 256K-q4_0 1M-f16 1M-q4_0
#   MARGINS: a subset of 0,1,2,3,4,5,6 (default all) to split a long part (1M: ~7 s a trial
#   with all seven) over calls; its files are named with it, e.g. rescore-1M-f16-m0-3.json
#   (the 8-bit-bounds sweep of this shape took 163 s for 2 variants, 16K-256K, 2 coverages
#   on an H200: bench/results/bounds-i8-margins-q4_0-h200.json)
# Then, anywhere: python3 bench/rescore_report.py OUT_DIR/*.json > bench/results/rescore-grid-h200.md
set -u -o pipefail
build=${1:?build dir}
out=${2:?out dir}
part=${3:?a part: CTX-TYPE, e.g. 256K-f16}
margins=${4:-0,1,2,3,4,5,6}
case $margins in *[!0-9,]* | "" | ,* | *,) echo "rescore-grid.sh: margins '$margins' is not a comma-separated list of integers" >&2; exit 2 ;; esac
name=$part
[ -n "${4:-}" ] && name=$part-m${margins//,/-}
ctx=${part%-*}
kt=${part#*-}
case $ctx in 16K | 64K | 256K | 1M) ;; *) echo "rescore-grid.sh: unknown context in '$part' (16K, 64K, 256K, 1M)" >&2; exit 2 ;; esac
case $kt in f16 | q4_0) ;; *) echo "rescore-grid.sh: unknown cache type in '$part' (f16, q4_0)" >&2; exit 2 ;; esac
mkdir -p "$out"
export QGEN_CACHE_DIR=${QGEN_CACHE_DIR:-/tmp/qgen-cache}
variants=qwen3-4b-$kt-r1,qwen3-4b-$kt-r2,qwen3-4b-$kt-r4,qwen3-4b-$kt-r8,qwen3-4b-$kt-r16
{ time "$build/qgen" eval --spec tests/gpu/rescore.lua --variant "$variants" --ctx "$ctx" \
    --coverage 0.25,0.125,0.0625 --margin "$margins" --selector quest,oracle --trials 50 --ref-ctx -1 \
    --threads "$(nproc)" --json "$out/rescore-$name.json"; } > "$out/rescore-$name.log" 2>&1
rc=$?
echo "$name: exit $rc ($(grep -m1 'workloads in' "$out/rescore-$name.log"))"
exit $rc
