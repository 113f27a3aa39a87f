#!/usr/bin/env bash
# ncu.sh — where the time goes: Nsight Compute on one launch of each kernel of interest,
#   bash bench/ncu.sh BUILD_DIR OUT_DIR
# (clocks left as the card has them: --clock-control none). One text report per case.
set -u
build=${1:?build dir}
out=${2:?out dir}
q="$build/qgen"
export QGEN_CACHE_DIR=${QGEN_CACHE_DIR:-/tmp/qgen-cache}
sec="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis"
run() { # name variant ctx coverage kernel
  timeout 120 ncu --clock-control none $sec --kernel-name "$5" --launch-skip 3 --launch-count 1 \
    "$q" bench --spec specs/qwen3-4b.lua --variant "$2" --ctx "$3" --batch 1 --coverage "$4" --runs 2 --warmup 2 \
    > "$out/ncu-$1.txt" 2>&1
  grep -E "Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per|Issue Slots Busy|No Eligible|Stall" "$out/ncu-$1.txt" | head -12 | sed "s/^/$1: /"
}
# A case is a name below or KERNEL:VARIANT:CTX:COVERAGE (e.g. qg_select:qwen3-4b:16K:0.25).
cases=${NCU_CASES:-"attend-f16-16k attend-f16-1m attend-q4-128k attend-q8-128k estimate-1m select-1m"}
for c in $cases; do
  case $c in
  *:*:*:*) IFS=: read -r k v x cv <<< "$c"; run "${k#qg_}-$v-$x-$cv" "$v" "$x" "$cv" "$k" ;;
  attend-f16-16k) run $c qwen3-4b 16K 1 qg_attend ;;
  attend-f16-1m) run $c qwen3-4b 1M 1 qg_attend ;;
  attend-q4-128k) run $c qwen3-4b-q4_0 128K 1 qg_attend ;;
  attend-q8-128k) run $c qwen3-4b-q8_0 128K 1 qg_attend ;;
  estimate-1m) run $c qwen3-4b 1M 0.25 qg_estimate ;;
  select-1m) run $c qwen3-4b 1M 0.25 qg_select ;;
  esac
done
