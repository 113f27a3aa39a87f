# device-lib.sh — steps the one-off device-call scripts (experiments/*/call*.sh, bench/results/*/call*.sh) share;
# source it from the repository root with OUT set (the device tool's output folder):
#   . bench/device-lib.sh
# Results go under $OUT/r; each step prints one line with the seconds since sourcing.
mkdir -p "$OUT/r"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/r/gpu.txt"
t0=${t0:-$(date +%s)}
elapsed() { echo "at $(($(date +%s) - t0)) s"; }
# "(N PASS, N FAIL)" of a qgen check log
pass_counts() { echo "($(grep -c PASS "$1") PASS, $(grep -c FAIL "$1") FAIL)"; }
# check_quick NAME SPEC SECONDS: qgen check --quick of SPEC (under the caller's QGEN_* env)
# into $OUT/r/check-NAME.log
check_quick() {
  timeout "$3" build-dev/qgen check --quick --spec "$2" > "$OUT/r/check-$1.log" 2>&1
  echo "$1: exit $? $(pass_counts "$OUT/r/check-$1.log") $(elapsed)"
}
# gpu_run_quick PART SECONDS: tests/gpu-run.sh's quick PART into $OUT/r/gpu-check-PART.log
gpu_run_quick() {
  timeout "$2" bash tests/gpu-run.sh build-dev "$OUT/r" quick "$1" > /dev/null 2>&1
  echo "$1: exit $? $(pass_counts "$OUT/r/gpu-check-$1.log") $(elapsed)"
}
# probe_if_time BUDGET: the probe grid with the peers and targets.py (bench/run.sh probe) into
# $OUT/r/probe, if more than 200 of the call's BUDGET seconds are left
probe_if_time() {
  local left=$(($1 - ($(date +%s) - t0)))
  echo "seconds left for the probe: $left"
  if [ $left -gt 200 ]; then
    timeout $left bash bench/run.sh build-dev "$OUT/r/probe" probe > "$OUT/r/probe.log" 2>&1
    echo "probe: rc $?"
    cat "$OUT/r/probe/targets.txt" 2> /dev/null
  fi
}
# ab_bench TYPE TREE ROUND QGEN SPEC VARIANT COVERAGE [VAR=VALUE ...]: one cell set of a
# same-call A/B: QGEN bench of VARIANT at 128K and 1M, batch AB_BATCH (default 1), 20 runs,
# under the VAR=VALUEs given (QGEN_TUNE, QGEN_TEMPLATE_DIR), into $OUT/r/ab-TYPE-TREE-ROUND.json
# and .log (the names bench/ab_summary.py reads; TYPE without dashes)
ab_bench() {
  local ty=$1 tree=$2 round=$3 q=$4 spec=$5 var=$6 cov=$7
  shift 7
  env "$@" timeout 60 "$q" bench --spec "$spec" --variant "$var" --ctx 128K,1M --batch "${AB_BATCH:-1}" --coverage "$cov" --runs 20 \
    --json "$OUT/r/ab-$ty-$tree-$round.json" > "$OUT/r/ab-$ty-$tree-$round.log" 2>&1 || echo "bench $ty $tree $round failed"
}
# ab_rounds QGEN "TREE=TUNE ..." "TYPE:SPEC:VARIANT ..." [COVERAGE]: two rounds of ab_bench,
# each round every tree (its QGEN_TUNE after the first '='; empty: the default plan) over every
# cell set, in that order; prints each round's time
ab_rounds() {
  local q=$1 trees=$2 cells=$3 cov=${4:-1} round tt c ty spec var
  for round in 1 2; do
    for tt in $trees; do
      for c in $cells; do
        IFS=: read -r ty spec var <<< "$c"
        ab_bench "$ty" "${tt%%=*}" $round "$q" "$spec" "$var" "$cov" QGEN_TUNE="${tt#*=}"
      done
    done
    echo "round $round $(elapsed)"
  done
}
# ncu_src TYPE CTX SECONDS TOP [--section S ...]: ncu stall sampling (SourceCounters, warp
# states, scheduler, speed of light, and the sections given) of build-dev's attend on
# qwen3-4b-TYPE, dense B1 at CTX, into $OUT/r: ncu-TYPE-ctx.txt (the sections),
# ncu-src-TYPE-ctx-sass.csv (per instruction) and ncu-sass-top-TYPE-ctx.txt (its TOP
# instructions by samples, bench/ncu_sass_top.py); ctx is CTX in lower case. NCU_KERNEL
# names another kernel (its name without qg_ then ends ctx in the file names) and NCU_COV
# a sparse step's coverage.
ncu_src() {
  local t=$1 ctx=$2 secs=$3 top=$4 tag k=${NCU_KERNEL:-qg_attend}
  tag=$(echo "$2" | tr '[:upper:]' '[:lower:]')${NCU_KERNEL:+-${k#qg_}}
  shift 4
  timeout "$secs" ncu --clock-control none --section SourceCounters --section WarpStateStats --section SchedulerStats --section SpeedOfLight \
    "$@" --kernel-name "$k" --launch-skip 3 --launch-count 1 -o "$OUT/r/src-$t-$tag" \
    build-dev/qgen bench --spec specs/qwen3-4b.lua --variant "qwen3-4b-$t" --ctx "$ctx" --batch 1 --coverage "${NCU_COV:-1}" --runs 2 --warmup 2 \
    > "$OUT/r/ncu-run-$t.log" 2>&1
  ncu --import "$OUT/r/src-$t-$tag.ncu-rep" --print-summary none > "$OUT/r/ncu-$t-$tag.txt" 2>&1
  ncu --import "$OUT/r/src-$t-$tag.ncu-rep" --page source --csv --print-source sass > "$OUT/r/ncu-src-$t-$tag-sass.csv" 2>&1
  python3 bench/ncu_sass_top.py "$OUT/r/ncu-src-$t-$tag-sass.csv" "$top" > "$OUT/r/ncu-sass-top-$t-$tag.txt" 2>&1
  head -3 "$OUT/r/ncu-sass-top-$t-$tag.txt"
  echo "ncu $t $(elapsed)"
}
# ab_trees "TREE:QGEN ..." "TYPE:SPEC:VARIANT ..." "COVERAGE ...": two rounds of ab_bench,
# each round every tree (its qgen), every coverage, every cell set (its TYPE then ends in c
# and the coverage's digits; an @ in VARIANT becomes the tree's name), in that order; then
# ab_summary
ab_trees() {
  local trees=$1 cells=$2 covs=$3 round tree cov c ty spec var
  for round in 1 2; do
    for tree in $trees; do
      for cov in $covs; do
        for c in $cells; do
          IFS=: read -r ty spec var <<< "$c"
          ab_bench "${ty}c${cov#0.}" "${tree%%:*}" $round "${tree#*:}" "$spec" "${var//@/${tree%%:*}}" "$cov"
        done
      done
    done
    echo "round $round $(elapsed)"
  done
  ab_summary
}
# memcheck_quick TYPE SECONDS: compute-sanitizer memcheck of qgen check --quick of
# qwen3-4b-TYPE into $OUT/r/memcheck-TYPE.log
memcheck_quick() {
  timeout "$2" compute-sanitizer --tool memcheck --error-exitcode 9 build-dev/qgen check --quick --spec specs/qwen3-4b.lua \
    --variant "qwen3-4b-$1" > "$OUT/r/memcheck-$1.log" 2>&1
  echo "memcheck $1: exit $? $(pass_counts "$OUT/r/memcheck-$1.log") $(tail -1 "$OUT/r/memcheck-$1.log") $(elapsed)"
}
# ab_summary: the A/B table of $OUT/r (bench/ab_summary.py) into $OUT/r/summary.txt, printed
ab_summary() {
  python3 bench/ab_summary.py "$OUT/r" > "$OUT/r/summary.txt" 2>&1
  cat "$OUT/r/summary.txt"
  elapsed
}
