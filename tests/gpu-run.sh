#!/usr/bin/env bash
# gpu-run.sh — the GPU test run on a GPU machine, from a build folder made elsewhere:
#   bash tests/gpu-run.sh BUILD_DIR [OUT_DIR] [quick|full] [PART]
# Prints the machine (GPU, driver), runs `qgen check` on every spec in specs/ and tests/gpu/,
# on qwen3-4b with select's short path off (QGEN_TUNE=selreg=0: the general path at small
# sizes) and with 128-thread select CTAs of one key a thread (QGEN_TUNE=sel=128,selreg=1:
# the cluster path at small sizes), with estimate and select as one launch (estsel=1, and
# with selreg=1 its cluster path at small sizes), with the persistent attend (persist=2, e4m3
# too), with attend's earlier quantized operands (olddq=1) and
# its plain ones where the swapped are the default (swap=0), on
# qwen3-4b's and qwen3-4b-fp8's variants from sm_80-only bundles (the driver JITs their PTX,
# so the sm_80 code paths run too) and, unless quick, on the > 4 GiB sequence for qwen3-4b;
# qgen eval on the GPU backend with its fp64 reference; the log is OUT_DIR/gpu-check.log. Then, unless quick, compute-sanitizer: memcheck on every
# kernel of two specs, racecheck (shared-memory hazards of attend, select, estimate) on two
# more and on the select cluster path, memcheck and racecheck on a two-stage top-p variant, quick sizes.
# PART runs one share of it, so a run fits calls of a few minutes each, logs apart
# (OUT_DIR/gpu-check-PART.log): specs (specs/*.lua), gpu-specs (tests/gpu/*.lua), paths
# (select's paths, the earlier quantized operands, the sm_80 PTX bundles, eval, the big
# sequence), emulate (every spec under QGEN_EMULATE of sm_86, sm_89 and sm_120), sanitizers; all (the default) is every part in one log. Measured on the H200
# (d9664ce), to plan device calls: quick specs 105 s; tests/gpu/rescore.lua alone at quick
# sizes 118 s; full sanitizers more than 200 s for its first four runs (memcheck of two specs,
# racecheck of two), then racecheck of select's cluster path (84 s for qwen3-4b's first
# variant alone; the part runs all four), memcheck of the two-stage top-p variant 9 s and its
# racecheck 126 s: over 10 minutes in all; full paths over 400 s (select's general and
# cluster paths at full sizes took ~380 s of it).
set -u -o pipefail
build=${1:?build dir}
out=${2:-.}
mode=${3:-full}
part=${4:-all}
case $mode in quick | full) ;; *) echo "gpu-run.sh: mode '$mode' is not quick or full" >&2; exit 2 ;; esac
case $part in all | specs | gpu-specs | paths | emulate | sanitizers) ;; *) echo "gpu-run.sh: unknown part '$part' (all, specs, gpu-specs, paths, emulate, sanitizers)" >&2; exit 2 ;; esac
want() { [ "$part" = all ] || [ "$part" = "$1" ]; }
mkdir -p "$out"
log="$out/gpu-check.log"
[ "$part" = all ] || log="$out/gpu-check-$part.log"
{
  echo "# qgen GPU check — $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "# command: bash tests/gpu-run.sh $*"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | sed 's/^/# gpu: /'
  echo "# cuda toolkit: $(ls -d /usr/local/cuda-* 2>/dev/null | tr '\n' ' ')"
} | tee "$log"
export QGEN_CACHE_DIR=${QGEN_CACHE_DIR:-/tmp/qgen-cache}
quick=""
[ "$mode" = quick ] && quick=--quick
fail=0
specs=""
want specs && specs="specs/*.lua"
want gpu-specs && specs="$specs tests/gpu/*.lua"
for s in $specs; do
  "$build/qgen" check --spec "$s" $quick 2>&1 | tee -a "$log" || fail=$((fail + 1))
done
if want paths; then
  # select's general path (lists longer than its short path holds), at quick sizes.
  QGEN_TUNE=selreg=0 "$build/qgen" check --spec specs/qwen3-4b.lua $quick 2>&1 | sed 's/^/selreg=0: /' | tee -a "$log"
  [ "${PIPESTATUS[0]}" = 0 ] || fail=$((fail + 1))
  # select's cluster path (sm_90: a list longer than one CTA's registers), at quick sizes:
  # 128-thread CTAs of one key a thread make the 9000-token sequence (141 pages) a cluster's.
  QGEN_TUNE=sel=128,selreg=1 "$build/qgen" check --spec specs/qwen3-4b.lua $quick 2>&1 | sed 's/^/sel=128,selreg=1: /' | tee -a "$log"
  [ "${PIPESTATUS[0]}" = 0 ] || fail=$((fail + 1))
  # estimate and select as one launch (qg_estsel, sm_90), at quick sizes on the cluster path:
  # one key a thread makes the 141 pages two CTAs' (and at full sizes, its 8 keys a thread).
  QGEN_TUNE=estsel=1,selreg=1 "$build/qgen" check --spec specs/qwen3-4b.lua $quick 2>&1 | sed 's/^/estsel=1,selreg=1: /' | tee -a "$log"
  [ "${PIPESTATUS[0]}" = 0 ] || fail=$((fail + 1))
  if [ "$mode" != quick ]; then
    QGEN_TUNE=estsel=1 "$build/qgen" check --spec specs/qwen3-4b.lua 2>&1 | sed 's/^/estsel=1: /' | tee -a "$log"
    [ "${PIPESTATUS[0]}" = 0 ] || fail=$((fail + 1))
  fi
  # the persistent attend (opt-in): its shares claimed across CTAs, its ring across shares
  for s in qwen3-4b qwen3-4b-fp8; do
    QGEN_TUNE=persist=2 "$build/qgen" check --spec specs/$s.lua $quick 2>&1 | sed 's/^/persist=2: /' | tee -a "$log"
    [ "${PIPESTATUS[0]}" = 0 ] || fail=$((fail + 1))
  done
  # attend's earlier quantized operands (QGEN_TUNE olddq=1: the default of q8_0/q8_0 only; the others A/B it).
  QGEN_TUNE=olddq=1 "$build/qgen" check --spec specs/qwen3-4b.lua $quick 2>&1 | sed 's/^/olddq=1: /' | tee -a "$log"
  [ "${PIPESTATUS[0]}" = 0 ] || fail=$((fail + 1))
  # attend's plain operands where the swapped ones are the default (quantized K and V, G <= 8).
  QGEN_TUNE=swap=0 "$build/qgen" check --spec specs/qwen3-4b.lua $quick 2>&1 | sed 's/^/swap=0: /' | tee -a "$log"
  [ "${PIPESTATUS[0]}" = 0 ] || fail=$((fail + 1))
  # The sm_80 code paths (cp.async producer) run here as sm_80 PTX, from sm_80-only bundles.
  mkdir -p "$out/sm80"
  for s in specs/qwen3-4b.lua specs/qwen3-4b-fp8.lua; do # fp8: the software conversions of sm_80
    "$build/qgen" bundle --spec "$s" --arch sm_80 -o "$out/sm80/" > /dev/null 2>&1 || fail=$((fail + 1))
  done
  for b in "$out"/sm80/*.qgb; do
    "$build/qgen" check --spec "$b" $quick 2>&1 | sed 's/^/sm_80 PTX: /' | tee -a "$log"
    [ "${PIPESTATUS[0]}" = 0 ] || fail=$((fail + 1))
  done
  rm -rf "$out/sm80"
  # qgen eval on the GPU backend with its fp64 reference on (which reads a host copy of the
  # GPU cache), every selector, an f16 and a q4_0 cache with f16 and 8-bit bounds.
  "$build/qgen" eval --spec tests/gpu/bounds-i8.lua --variant qwen3-4b-f16-bounds-f16,qwen3-4b-f16-bounds-i8,qwen3-4b-q4_0-bounds-f16,qwen3-4b-q4_0-bounds-i8 --ctx 16K --trials 2 \
    --selector quest,oracle,meanpool,quest-i8,rescore4 2>&1 | tail -n 1 | sed 's/^/eval gpu: /' | tee -a "$log"
  [ "${PIPESTATUS[0]}" = 0 ] || fail=$((fail + 1))
  if [ "$mode" != quick ]; then
    "$build/qgen" check --spec specs/qwen3-4b.lua --big 2>&1 | grep -E "big|checks passed|FAIL" | tee -a "$log" || fail=$((fail + 1))
  fi
fi
if want emulate; then
  # The plans of the 99 KiB architectures (sm_86, sm_89, sm_120) run here under QGEN_EMULATE:
  # each spec's kernels planned for that arch, its PTX (sm_86, sm_89) or sm_90 code with its
  # plan (sm_120, whose features sm_90 has) loaded on this GPU, every launch capped at its
  # limits. Correctness only: the speed is this GPU's, not the emulated one's. The checks run
  # EMULATE_JOBS at a time (default 8: their NVRTC compiles are the long part), logs joined
  # in order.
  mkdir -p "$out/emulate"
  for a in ${EMULATE_ARCHS:-sm_86 sm_89 sm_120}; do for s in specs/*.lua tests/gpu/*.lua; do echo "$a $s"; done; done |
    B="$build" Q="$quick" O="$out" xargs -P "${EMULATE_JOBS:-8}" -L 1 sh -c 'f="$O/emulate/$0-$(basename "$1" .lua)";
      QGEN_EMULATE=$0 "$B/qgen" check --spec "$1" $Q > "$f.log" 2>&1; echo $? > "$f.rc"' 
  for a in ${EMULATE_ARCHS:-sm_86 sm_89 sm_120}; do for s in specs/*.lua tests/gpu/*.lua; do
    f="$out/emulate/$a-$(basename "$s" .lua)"
    sed "s/^/QGEN_EMULATE=$a: /" "$f.log" | tee -a "$log"
    [ "$(cat "$f.rc" 2>/dev/null)" = 0 ] || fail=$((fail + 1))
  done; done
  rm -rf "$out/emulate"
fi
if want sanitizers && [ "$mode" != quick ] && command -v compute-sanitizer > /dev/null; then
  for s in qwen3-4b qwen2.5-14b-1m; do
    compute-sanitizer --tool memcheck "$build/qgen" check --spec specs/$s.lua --quick 2>&1 | grep -E "ERROR SUMMARY|checks passed" | sed "s/^/memcheck $s: /" | tee -a "$log"
  done
  for s in qwen2.5-0.5b gemma-3-4b; do
    compute-sanitizer --tool racecheck "$build/qgen" check --spec specs/$s.lua --quick 2>&1 | grep -E "RACECHECK SUMMARY|checks passed" | sed "s/^/racecheck $s: /" | tee -a "$log"
  done
  QGEN_TUNE=sel=128,selreg=1 compute-sanitizer --tool racecheck "$build/qgen" check --spec specs/qwen3-4b.lua --quick 2>&1 |
    grep -E "RACECHECK SUMMARY|checks passed" | sed "s/^/racecheck select cluster: /" | tee -a "$log"
  QGEN_TUNE=estsel=1,selreg=1 compute-sanitizer --tool racecheck "$build/qgen" check --spec specs/qwen3-4b.lua --variant qwen3-4b --quick 2>&1 |
    grep -E "RACECHECK SUMMARY|checks passed" | sed "s/^/racecheck estsel cluster: /" | tee -a "$log"
  QGEN_TUNE=persist=2 compute-sanitizer --tool racecheck "$build/qgen" check --spec specs/qwen3-4b.lua --variant qwen3-4b --quick 2>&1 |
    grep -E "RACECHECK SUMMARY|checks passed" | sed "s/^/racecheck persistent attend: /" | tee -a "$log"
  # the two-stage kernels and the top-p cut (shared-memory histograms), an f16 cache with its sketch,
  # at a p that cuts the check's lists
  for t in memcheck racecheck; do
    compute-sanitizer --tool $t "$build/qgen" check --spec tests/gpu/rescore.lua --variant qwen3-4b-f16-r4-p0.3 --quick 2>&1 |
      grep -E "ERROR SUMMARY|RACECHECK SUMMARY|checks passed" | sed "s/^/$t rescore top-p: /" | tee -a "$log"
  done
  grep -qE "ERROR SUMMARY: [1-9]|RACECHECK SUMMARY: [1-9]" "$log" && fail=$((fail + 1))
fi
echo "# specs with failures: $fail" | tee -a "$log"
exit $((fail > 0))
