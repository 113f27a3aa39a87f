#!/usr/bin/env bash
# test_spec_grid.sh — every spec of the shape grid compiles for sm_80 and sm_90 without
# spills, and on the architectures of 99 KiB a CTA (sm_86, sm_89, sm_120) either fits, planned
# for their limits (a quarter of the sampled variants compiled for sm_86 and another quarter
# for sm_120, without spills), or is refused naming the kernel and the limit: head_dim 32..256 (step 32) x group {1,2,3,4,5,7,8,16,32,64} x in_type
# {f16,f32,bf16} x K/V type {f16,bf16,q8_0,q4_0,q5_0,e4m3,e5m2} (fp8: head_dim a multiple of
# 64, as the validator asks), sparse (so all seven kernels are built),
# with f16 page bounds and, in every other sampled one and in seven of the corner's, 8-bit
# bounds (sparse.bounds = "i8": another append and view, which read K, and estimate, which
# reads q; the seven are every K/V type once and every in_type at least twice).
#
# The whole grid is 1440 variants at ~1-2 s each; by default this runs the corner where
# estimate is largest (head_dim 256, group 64: every in_type x K/V type) and a fixed sample
# of 40 others; QGEN_GRID=all runs every one; QGEN_TEST_QUICK=1 plans them all but compiles
# one in nine (the sanitizer pass). Each combination is a variant of a generated multi-variant spec, emitted
# by `qgen emit` into a fresh cache; it must exit 0 and its report show, for each variant
# and arch, the seven kernels, view, estimate, select, estsel and extend with 0/0 spill stores/loads and a stack
# of 0 (a spill in append or attend is printed as a note: ptxas spills a few bytes of
# attend on sm_90 for some small quantized shapes).
#
# Environment (set by ctest): QGEN, QGEN_SOURCE_DIR.
. "$(dirname "$0")/lib.sh"

dims=(32 64 96 128 160 192 224 256)
groups=(1 2 3 4 5 7 8 16 32 64)
ins=(f16 f32 bf16)
kvs=(f16 bf16 q8_0 q4_0 q5_0 e4m3 e5m2)

# The combinations, one "D G IN KV" a line.
all() {
  for d in "${dims[@]}"; do for g in "${groups[@]}"; do for i in "${ins[@]}"; do for k in "${kvs[@]}"; do
    case $k in e4m3 | e5m2) [ $((d % 64)) = 0 ] || continue ;; esac
    echo "$d $g $i $k"
  done; done; done; done
}
corner() { [ "$1" = 256 ] && [ "$2" = 64 ]; } # D G: the corner run in full
if [ "${QGEN_GRID:-}" = all ]; then
  all >"$tmp/combos"
else
  # the corner, then every 23rd of the rest (23 is prime to the inner sizes 3 and 5, so the
  # sample walks through all in/KV types)
  all | while read -r d g i k; do corner "$d" "$g" && echo "$d $g $i $k"; done >"$tmp/combos"
  all | while read -r d g i k; do corner "$d" "$g" || echo "$d $g $i $k"; done | awk 'NR % 23 == 5' | head -n 40 >>"$tmp/combos"
fi
# the bounds of each: f16; i8 for a copy of every third of the corner's (in_type-major, 7
# K/V types: a diagonal through both) and for every other one of the rest
awk '{ print $0, "f16" } /^256 64 / && n++ % 3 == 0 { print $0, "i8" }' "$tmp/combos" | awk '!/^256 64 / && NR % 2 == 0 { $5 = "i8" } 1' >"$tmp/combos.b"
mv "$tmp/combos.b" "$tmp/combos"
echo "$(wc -l <"$tmp/combos") combinations"
# What is compiled: every combination, or with QGEN_TEST_QUICK (the sanitizer pass, where
# NVRTC's own time finds nothing in qgen's code) one in nine of them; every combination is
# still planned on all five archs, which costs no compile.
quick=0
case ${QGEN_TEST_QUICK:-0} in "" | 0) ;; *) quick=1 ;; esac
awk -v q=$quick 'q == 0 || NR % 9 == 1 { print "d" $1 "-g" $2 "-" $3 "-" $4 "-" $5 }' "$tmp/combos" >"$tmp/compiled"
[ $quick = 1 ] && echo "quick (QGEN_TEST_QUICK): $(wc -l <"$tmp/compiled") of them compiled"

# write_spec LIST OUT: the spec file of the combinations in LIST
write_spec() {
  {
    echo "return {"
    while read -r d g i k b; do
      echo "  spec{ name = \"d$d-g$g-$i-$k-$b\", head_dim = $d, n_head = $((2 * g)), n_head_kv = 2, in_type = \"$i\", k_type = \"$k\", sparse = { bounds = \"$b\" }, archs = { \"sm_80\", \"sm_90\" } },"
    done <"$1"
    echo "}"
  } >"$2"
}

# check_report OUT N ARCHS K: emit's report OUT holds N variants, each with K kernel lines on
# the archs matching ARCHS (a regex such as "80|90"), estimate, select, estsel, view and extend with
# spill 0/0 and stack 0 (a spill in append or attend is a note).
check_report() {
  awk -v want="$2" -v archs="$3" -v per="$4" '
    /^d[0-9]+-g[0-9]+-[a-z0-9_-]+ \(/ { v = $1; n++ }
    $0 ~ "^  sm_(" archs ") +qg_[a-z]+ +regs" {
      k[v]++
      if ($6 == "0/0" && $8 == 0) next
      if ($2 == "qg_estimate" || $2 == "qg_select" || $2 == "qg_estsel" || $2 == "qg_view" || $2 == "qg_extend") { printf "FAIL %s %s %s: regs %s spill %s stack %s\n", v, $1, $2, $4, $6, $8; bad++ }
      else printf "note %s %s %s: regs %s spill %s stack %s\n", v, $1, $2, $4, $6, $8
    }
    END {
      for (x in k) if (k[x] != per) { printf "FAIL %s: %d kernel lines, want %d\n", x, k[x], per; bad++ }
      if (n != want) { printf "FAIL %d variants reported, want %d\n", n, want; bad++ }
      exit bad > 0
    }' "$1"
}

# Spec files of at most 32 variants (QGEN_MAX_VARIANTS), named d<D>-g<G>-<in>-<kv>-<bounds>.
split -l 32 "$tmp/combos" "$tmp/part."
for part in "$tmp"/part.*; do
  spec="$part.lua"
  write_spec "$part" "$spec"
  # the plans on every listed arch, nothing compiled: a variant may be refused only on an
  # arch of 99 KiB a CTA, naming the kernel and the limit
  "$QGEN" emit --spec "$spec" --plan --arch sm_80,sm_86,sm_89,sm_90,sm_120 >"$part.plan" 2>&1
  ok $? "emit --plan of $(wc -l <"$part") variants on sm_80, sm_86, sm_89, sm_90, sm_120"
  awk '/^d[0-9]+-g[0-9]+-[a-z0-9_-]+ \(/ { v = $1 }
    /does not fit/ {
      if ($1 !~ /^sm_(86|89|120)$/ || $0 !~ /qg_[a-z]+ needs [0-9]+ bytes/ || $0 !~ /allows 101376/) { print "FAIL " v ": " $0; bad++ }
      else refused[v] = refused[v] " " $1
    }
    END { for (x in refused) print "refused " x refused[x] > "/dev/stderr"; exit bad > 0 }' "$part.plan" 2>"$part.refused"
  ok $? "refusals only on the 99 KiB archs, each naming the kernel and the limit ($(wc -l <"$part.refused") variants refused there)"
  # the part's combinations that are compiled (all of them unless quick)
  awk 'NR == FNR { want[$1]; next } ("d" $1 "-g" $2 "-" $3 "-" $4 "-" $5) in want' "$tmp/compiled" "$part" >"$part.c"
  [ -s "$part.c" ] || continue
  write_spec "$part.c" "$part.c.lua"
  "$QGEN" emit --spec "$part.c.lua" >"$part.out" 2>&1
  ok $? "emit $(wc -l <"$part.c") variants ($(head -n 1 "$part.c" | tr ' ' /) .. $(tail -n 1 "$part.c" | tr ' ' /))"
  # every variant: 2 archs x 7 kernels, each spill 0/0 and stack 0
  check_report "$part.out" "$(wc -l <"$part.c")" "80|90" 14
  ok $? "no spills, no stack in $(wc -l <"$part.c") variants x sm_80, sm_90"
  [ "$fail" = 0 ] || tail -n 40 "$part.out"
  # the variants that fit 99 KiB a CTA, every fourth one on sm_86 (sm_89 has its limits and
  # plan) and every fourth from the third on sm_120 (its own ptxas): half of them, each on one
  # of the two, to bound the compile time
  awk '{ print $2 }' "$part.refused" | sed 's/^/^  spec{ name = "/; s/$/"/' >"$part.skip"
  for a in sm_86:1 sm_120:3; do
    arch=${a%:*}
    awk -v r=${a#*:} 'NR % 4 == r' "$part.c" | while read -r d g i k b; do echo "d$d-g$g-$i-$k-$b"; done >"$part.small"
    {
      echo "return {"
      grep -F -f <(sed 's/^/name = "/; s/$/"/' "$part.small") "$part.c.lua" | grep -v -f "$part.skip"
      echo "}"
    } >"$part.99.lua"
    n99=$(grep -c "spec{" "$part.99.lua")
    [ "$n99" -gt 0 ] || continue
    "$QGEN" emit --spec "$part.99.lua" --arch $arch >"$part.99.out" 2>&1
    ok $? "emit $n99 variants that fit 99 KiB for $arch"
    check_report "$part.99.out" "$n99" "${arch#sm_}" 7
    ok $? "no spills, no stack in $n99 variants x $arch"
    [ "$fail" = 0 ] || tail -n 40 "$part.99.out"
  done
done
finish
