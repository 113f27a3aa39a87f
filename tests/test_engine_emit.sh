#!/usr/bin/env bash
# test_engine_emit.sh — the engine modules (`qgen emit --step N`: the kernels a verify step of
# up to N query tokens, a window or sinks runs; the library builds them on a GPU at first
# use, where a failure would surface mid-decode) with no GPU: every variant of every spec in
# specs/ and tests/gpu/ plans an engine module on sm_86 and sm_90 (at least the 1-token one,
# which windows and sinks need); each specs/ variant's largest step that plans compiles for
# both arches with no spills (with QGEN_TEST_QUICK, qwen3-4b's only), and specs/ variants
# take verify steps of >= 4 tokens; qwen3-4b's 8-token modules under the m-tiles a warp that
# their default is not (QGEN_TUNE mtw) compile spill-free too; a step that no power of two
# names and -o are refused.
# Env: QGEN (the binary), QGEN_SOURCE_DIR.
set -u
. "$(dirname "$0")/lib.sh"

# The largest step of 16, 8, 4, 2, 1 whose plan fits ARCH, for each variant of SPEC, as
# "variant step" lines ("variant 0" where none fits).
largest_steps() {
  local spec=$1 arch=$2 s
  for s in 16 8 4 2 1; do
    "$QGEN" emit --spec "$spec" --arch "$arch" --step $s --plan 2>&1 |
      awk -v s=$s -v a="$arch" '/^[^ ].* \(.*\): head_dim/ { v = $1 } $1 == a && v != "" { print v, ($2 == "does" ? 0 : s); v = "" }'
  done | awk '{ if (!($1 in best) || $2 > best[$1]) best[$1] = $2 } END { for (v in best) print v, best[v] }' | sort
}

for arch in sm_86 sm_90; do
  for spec in specs/*.lua tests/gpu/*.lua; do
    largest_steps "$spec" "$arch" > "$tmp/steps.txt"
    n=$(wc -l < "$tmp/steps.txt")
    none=$(awk '$2 == 0 { printf "%s ", $1 }' "$tmp/steps.txt")
    ok $([ "$n" -gt 0 ] && [ -z "$none" ]; echo $?) "$arch $spec: all $n variants plan an engine module (none: ${none:-no variant})"
    case $spec in specs/*) ;; *) continue ;; esac
    # the sanitizer pass (QGEN_TEST_QUICK) compiles one spec's: NVRTC's time is not what it checks
    [ "${QGEN_TEST_QUICK:-0}" = 1 ] && [ "$spec" != specs/qwen3-4b.lua ] && continue
    short=$(awk '$2 < 4 { printf "%s(%s) ", $1, $2 }' "$tmp/steps.txt")
    ok $([ -z "$short" ]; echo $?) "$arch $spec: verify steps of >= 4 tokens (${short:-every variant})"
    while read -r v s; do
      [ "$s" -gt 0 ] || continue
      "$QGEN" emit --spec "$spec" --variant "$v" --arch "$arch" --step "$s" > "$tmp/emit.txt" 2>&1
      rc=$?
      spills=$(grep -E "^  $arch +qg_" "$tmp/emit.txt" | grep -vc "spill 0/0")
      kernels=$(grep -cE "^  $arch +qg_(estimate|attend) " "$tmp/emit.txt")
      ok $([ $rc = 0 ] && [ "$spills" = 0 ] && [ "$kernels" -ge 1 ]; echo $?) \
        "$arch $v --step $s compiles (rc $rc, $kernels of estimate/attend reported, $spills kernels spilling)"
    done < "$tmp/steps.txt"
  done
done

# The m-tiles a consumer warp other than the default (QGEN_TUNE mtw; the 8-token step's 32
# rows are two m-tiles): f16 with both in one warp, q4_0 with one a warp compile spill-free
# for both arches too
for arch in sm_86 sm_90; do
  for vt in qwen3-4b:2 qwen3-4b-q4_0:1; do
    v=${vt%:*} w=${vt#*:}
    QGEN_TUNE=mtw=$w "$QGEN" emit --spec specs/qwen3-4b.lua --variant $v --arch $arch --step 8 > "$tmp/emit.txt" 2>&1
    rc=$?
    line=$(grep -E "^  $arch +qg_attend " "$tmp/emit.txt")
    ok $([ $rc = 0 ] && [ -n "$line" ] && ! grep -E "^  $arch +qg_" "$tmp/emit.txt" | grep -vq "spill 0/0"; echo $?) \
      "mtw=$w $arch $v --step 8 compiles, no spills (rc $rc; ${line:-no attend reported})"
  done
done

"$QGEN" emit --spec specs/qwen3-4b.lua --step 3 > "$tmp/out.txt" 2>&1
[ $? = 1 ] && grep -q "take 1, 2, 4, 8 or 16" "$tmp/out.txt"; ok $? "--step 3 refused, naming the steps there are"
"$QGEN" emit --spec specs/qwen3-4b.lua --step 0 --plan > "$tmp/out.txt" 2>&1
[ $? = 1 ] && grep -q "take 1, 2, 4, 8 or 16" "$tmp/out.txt"; ok $? "--step 0 refused, not taken for the one-token module"
"$QGEN" emit --spec specs/qwen3-4b.lua --step 4 -o "$tmp/o" > "$tmp/out.txt" 2>&1
[ $? = 1 ] && [ ! -e "$tmp/o" ] && grep -q "without -o" "$tmp/out.txt"; ok $? "--step with -o refused, nothing written"
"$QGEN" emit --spec specs/qwen3-4b.lua --step 4 --plan --arch sm_90 > "$tmp/out.txt" 2>&1
[ $? = 0 ] && grep -q "sm_90  attend" "$tmp/out.txt"; ok $? "--step with --plan prints the engine module's plan"
finish
