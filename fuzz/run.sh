#!/usr/bin/env bash
# fuzz/run.sh — build the libFuzzer harnesses with clang and run each for a bounded time.
#
#   fuzz/run.sh [SECONDS_PER_HARNESS]     (default 60; env FUZZ_BUILD_DIR, default build-fuzz)
#
# FUZZ_JOBS harnesses run at a time (default: the number of cores; each is one process of
# one thread, so each still gets its whole time on a core of its own).
# Each harness starts from its committed seeds (fuzz/corpus/<name>/; the spec harness from
# specs/, tests/gpu/ and tests/specs_bad/; all read only) plus a scratch corpus in the
# build directory, with -max_total_time and -rss_limit_mb=2048.
# Exits non-zero when a build fails or any harness finds a crash, a leak, a timeout or an
# out-of-memory (the reproducer is left in the build directory as crash-*/leak-*/... and
# its path printed). Prints per harness: executions, coverage and features at the end.
set -uo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
build=${FUZZ_BUILD_DIR:-build-fuzz}
cc=${FUZZ_CC:-clang}
command -v "$cc" > /dev/null || { echo "fuzz/run.sh: $cc not found (apt-get install clang libclang-rt-14-dev)"; exit 1; }

mkdir -p "$build"
cmake -S . -B "$build" -DCMAKE_C_COMPILER="$cc" -DQGEN_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo > "$build/fuzz-cmake.log" 2>&1 \
  || { cat "$build/fuzz-cmake.log"; exit 1; }
harnesses=(fuzz_spec fuzz_artifact fuzz_cache fuzz_bundle fuzz_view fuzz_ops)
cmake --build "$build" -j"$(nproc)" --target "${harnesses[@]}" > "$build/fuzz-build.log" 2>&1 \
  || { tail -50 "$build/fuzz-build.log"; exit 1; }

jobs=${FUZZ_JOBS:-$(nproc)}
# fuzz_one HARNESS: runs it; its report goes to stdout, its verdict (ok or FAIL and the
# summary line) to $build/fuzz-NAME.verdict
fuzz_one() {
  local h=$1 name=${1#fuzz_}
  local seeds work art extra log rc t0 t1 execs last cov ft line
  seeds=(fuzz/corpus/$name)
  # the spec harness seeds from the project's own specs, good and hostile, where they live
  [ "$name" = spec ] && seeds=(specs tests/gpu tests/specs_bad)
  work=$build/fuzz-work/$name
  art=$build/fuzz-artifacts/$name/
  rm -rf "$art"
  mkdir -p "$work" "$art"
  extra=()
  [ "$name" = spec ] && extra+=(-dict=fuzz/spec.dict -max_len=4096)
  [ "$name" = bundle ] && extra+=(-max_len=8192)
  log=$build/fuzz-$name.log
  echo "== $h: ${secs}s from $(find "${seeds[@]}" -type f | wc -l) seeds"
  t0=$(date +%s)
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$build/fuzz/$h" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=30 -print_final_stats=1 \
    -artifact_prefix="$art" "${extra[@]}" "$work" "${seeds[@]}" > "$log" 2>&1
  rc=$?
  t1=$(date +%s)
  execs=$(grep -ao 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
  last=$(grep -aE '^#[0-9]+' "$log" | tail -1)
  cov=$(echo "$last" | grep -o 'cov: [0-9]*' | grep -o '[0-9]*')
  ft=$(echo "$last" | grep -o 'ft: [0-9]*' | grep -o '[0-9]*')
  line="$h: ${execs:-?} execs in $((t1 - t0)) s, cov ${cov:-?}, ft ${ft:-?}, corpus $(ls "$work" | wc -l) files"
  if [ $rc -ne 0 ] || ls "$art" | grep -q .; then
    echo "FAIL $line (exit $rc)"
    grep -aE 'ERROR|SUMMARY|fuzz_[a-z]+: |runtime error|Test unit written' "$log" | head -20
    ls -1 "$art" | sed "s|^|  reproducer: $art|"
    echo "FAIL $line" > "$build/fuzz-$name.verdict"
  else
    echo "ok   $line"
    echo "ok   $line" > "$build/fuzz-$name.verdict"
  fi
}

echo "== ${#harnesses[@]} harnesses, ${secs}s each, $jobs at a time"
running=0
for h in "${harnesses[@]}"; do
  rm -f "$build/fuzz-${h#fuzz_}.verdict"
  fuzz_one "$h" > "$build/fuzz-${h#fuzz_}.report" 2>&1 &
  running=$((running + 1))
  if [ $running -ge "$jobs" ]; then
    wait -n
    running=$((running - 1))
  fi
done
wait
fail=0 pass=0
summary=()
for h in "${harnesses[@]}"; do
  cat "$build/fuzz-${h#fuzz_}.report"
  v=$(cat "$build/fuzz-${h#fuzz_}.verdict" 2> /dev/null || echo "FAIL $h: no verdict (the run died)")
  case $v in ok*) pass=$((pass + 1)) ;; *) fail=$((fail + 1)) ;; esac
  summary+=("$v")
done
echo "== fuzz summary"
printf '%s\n' "${summary[@]}"
echo "$pass passed, $fail failed"
[ $fail = 0 ]
