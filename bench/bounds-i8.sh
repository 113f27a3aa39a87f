#!/usr/bin/env bash
# bounds-i8.sh — f16 vs 8-bit page bounds on the GPU (whether they pick the same pages), over the
# Qwen3-4B-shaped variants of tests/gpu/bounds-i8.lua (f16 and q4_0 caches, each with
# sparse.bounds f16 and i8), in parts that each fit one device call (times on an H200, from
# bench/results/quality-h200.md scaled to 4 variants):
#   bash bench/bounds-i8.sh BUILD_DIR OUT_DIR main       the grid: 16K-1M x 50/25/12.5/6.25 % x
#                                                        4 tasks x 50 trials (~4.5 min)
#   bash bench/bounds-i8.sh BUILD_DIR OUT_DIR margins    margins 0-6 at 25 % and 6.25 %, 16K-256K,
#                                                        50 trials, no output errors (~3.5 min)
#   bash bench/bounds-i8.sh BUILD_DIR OUT_DIR margins1m-a   the same at 1M, 25 % (~3 min)
#   bash bench/bounds-i8.sh BUILD_DIR OUT_DIR margins1m-b   the same at 1M, 6.25 % (~3 min)
#   bash bench/bounds-i8.sh BUILD_DIR OUT_DIR ab         estimate and step time, each variant at
#                                                        128K and 1M, B1 and B4 (bench/tune.sh)
# Then, anywhere: python3 bench/bounds_compare.py --main OUT/main.json
#   --margins OUT/margins.json OUT/margins1m-a.json OUT/margins1m-b.json --out bench/results/bounds-i8-h200
set -u -o pipefail
build=${1:?build dir}
out=${2:?out dir}
part=${3:?main, margins, margins1m-a, margins1m-b or ab}
mkdir -p "$out"
export QGEN_CACHE_DIR=${QGEN_CACHE_DIR:-/tmp/qgen-cache}
spec=tests/gpu/bounds-i8.lua
variants=qwen3-4b-f16-bounds-f16,qwen3-4b-f16-bounds-i8,qwen3-4b-q4_0-bounds-f16,qwen3-4b-q4_0-bounds-i8
eval_run() { # name, then the options of the run
  local name=$1
  shift
  { time "$build/qgen" eval --spec "$spec" --variant "$variants" --trials 50 --threads "$(nproc)" \
      --json "$out/$name.json" "$@"; } > "$out/$name.log" 2>&1
  echo "$name: exit $? ($(grep -m1 'workloads in' "$out/$name.log"))"
}
case $part in
main) eval_run main --ctx 16K,64K,256K,1M --coverage 0.5,0.25,0.125,0.0625 ;;
margins) eval_run margins --ctx 16K,64K,256K --coverage 0.25,0.0625 --margin 0,1,2,3,4,5,6 --ref-ctx -1 --selector quest,oracle ;;
margins1m-a) eval_run margins1m-a --ctx 1M --coverage 0.25 --margin 0,1,2,3,4,5,6 --ref-ctx -1 --selector quest,oracle ;;
margins1m-b) eval_run margins1m-b --ctx 1M --coverage 0.0625 --margin 0,1,2,3,4,5,6 --ref-ctx -1 --selector quest,oracle ;;
ab)
  for v in ${variants//,/ }; do
    echo "== $v"
    NOCHECK=1 SPEC=$spec VARIANT=$v CELLS="--ctx 128K,1M --batch 1,4 --coverage 0.25,0.0625" bash bench/tune.sh "$build" "$out/ab-$v" ""
  done
  ;;
*) echo "bounds-i8.sh: unknown part '$part' (main, margins, margins1m-a, margins1m-b, ab)" >&2; exit 2 ;;
esac
