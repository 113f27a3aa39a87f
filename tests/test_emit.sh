#!/usr/bin/env bash
# test_emit.sh — `qgen emit` end to end (no GPU needed): the main spec writes its unit,
# cubins for sm_80 and sm_90 and the PTX, compiling every kernel; a second run is all cache
# hits; every spec in specs/ and tests/gpu/ emits; bad arguments exit 1 (the option parser
# of every command); FIFO, directory and pipe spec paths; QGEN_TUNE.
# Env: QGEN (the binary), QGEN_SOURCE_DIR.
set -u
. "$(dirname "$0")/lib.sh"

"$QGEN" emit --spec specs/qwen3-4b.lua -o "$tmp/out" > "$tmp/first.txt" 2>&1
ok $? "emit specs/qwen3-4b.lua -o DIR exits 0"
n_cu=$(ls "$tmp/out"/*.cu 2>/dev/null | wc -l)
n_cubin=$(ls "$tmp/out"/*_sm80.cubin "$tmp/out"/*_sm90.cubin 2>/dev/null | wc -l)
n_ptx=$(ls "$tmp/out"/*.ptx 2>/dev/null | wc -l)
ok $([ "$n_cu" = 3 ] && [ "$n_cubin" = 6 ] && [ "$n_ptx" = 3 ]; echo $?) "writes 3 units, 6 cubins (sm_80, sm_90), 3 PTX files for the 3 variants (got $n_cu/$n_cubin/$n_ptx)"
n=$(grep -cE "sm_(80|90) +module +cubin [0-9]+ B .* ms +miss$" "$tmp/first.txt")
ok $([ "$n" = 6 ] && echo 0 || echo 1) "one module compiled per variant and arch, its cubin size and time on its own line ($n of 6)"
for k in qg_append qg_estimate qg_select qg_attend; do
  n=$(grep -cE "sm_(80|90) +$k +regs .* smem [0-9]+ static \+ [0-9]+ dynamic$" "$tmp/first.txt")
  ok $([ "$n" = 6 ] && echo 0 || echo 1) "kernel $k reported for sm_80 and sm_90 in every variant ($n of 6 lines)"
done
# the dynamic shared memory attend launches with (the plan), not only ptxas' static 208 B
grep -qE "sm_90 +qg_attend .* smem [0-9]+ static \+ [1-9][0-9]{4,} dynamic$" "$tmp/first.txt"
ok $? "attend's line shows the dynamic shared memory of its launch"
grep -q "spill 0/0" "$tmp/first.txt"; ok $? "ptxas report (registers, spills) printed"
grep -q "cache per token per layer: 4096 bytes" "$tmp/first.txt"; ok $? "bytes per token of the layout printed"
grep -q "#define QG_HEAD_DIM 128" "$tmp/out"/qwen3-4b_d128_*_if16_of16_b64_sparse.cu; ok $? "the unit starts with the generated constants"

t0=$(date +%s%N)
"$QGEN" emit --spec specs/qwen3-4b.lua > "$tmp/second.txt" 2>&1
rc=$?
t1=$(date +%s%N)
ok $rc "second emit exits 0"
misses=$(grep -c " miss$" "$tmp/second.txt")
hits=$(grep -c " hit$" "$tmp/second.txt")
ok $([ "$misses" = 0 ] && [ "$hits" = 6 ]; echo $?) "second emit is all cache hits ($hits hits, $misses misses; $(((t1 - t0) / 1000000)) ms)"

for s in specs/*.lua tests/gpu/*.lua; do
  "$QGEN" emit --spec "$s" > "$tmp/all.txt" 2>&1
  ok $? "emit $s"
done

"$QGEN" emit --spec specs/qwen2.5-0.5b.lua --print --arch sm_90 > "$tmp/print.txt" 2>&1
grep -q "extern \"C\" __global__ void" "$tmp/print.txt"; ok $? "--print writes the unit to stdout"
"$QGEN" emit > /dev/null 2>&1; ok $([ $? = 1 ]; echo $?) "emit without --spec exits 1"
"$QGEN" emit --spec specs/qwen3-4b.lua --arch sm_75 > /dev/null 2>"$tmp/err.txt"; rc=$?
ok $([ $rc = 1 ] && grep -q "sm_80 or newer" "$tmp/err.txt"; echo $?) "--arch sm_75 exits 1 and says why"
"$QGEN" emit --spec specs/qwen3-4b.lua --arch 90 > /dev/null 2>&1; ok $([ $? = 1 ]; echo $?) "--arch 90 (no sm_) exits 1"
"$QGEN" emit --spec specs/qwen3-4b.lua --variant nope > /dev/null 2>&1; ok $([ $? = 1 ]; echo $?) "an unknown --variant exits 1"
"$QGEN" frobnicate > /dev/null 2>&1; ok $([ $? = 1 ]; echo $?) "an unknown command exits 1"
"$QGEN" --help | grep -q "emit"; ok $? "qgen --help lists the commands"
"$QGEN" emit --help | grep -q -- "--arch"; ok $? "qgen emit --help explains the options"
# The option parser (tools/opts.c) every command shares: unknown options and missing or
# malformed values exit 1 and say so; --name=VALUE is --name VALUE.
"$QGEN" emit --bogus > /dev/null 2>"$tmp/err.txt"; rc=$?
ok $([ $rc = 1 ] && grep -q "unknown option '--bogus'.*see qgen emit --help" "$tmp/err.txt"; echo $?) "an unknown option exits 1 naming it"
"$QGEN" emit --spec > /dev/null 2>"$tmp/err.txt"; rc=$?
ok $([ $rc = 1 ] && grep -q "\-\-spec FILE: missing value" "$tmp/err.txt"; echo $?) "an option without its value exits 1"
"$QGEN" check --spec specs/qwen3-4b.lua --seed abc > /dev/null 2>"$tmp/err.txt"; rc=$?
ok $([ $rc = 1 ] && grep -q "\-\-seed 'abc'" "$tmp/err.txt"; echo $?) "check --seed abc exits 1"
"$QGEN" bench --spec=specs/qwen3-4b.lua --runs=many > /dev/null 2>"$tmp/err.txt"; rc=$?
ok $([ $rc = 1 ] && grep -q "\-\-runs 'many'" "$tmp/err.txt"; echo $?) "bench --runs=many exits 1"
"$QGEN" eval --spec specs/qwen3-4b.lua --ctx 16K,x > /dev/null 2>&1; ok $([ $? = 1 ]; echo $?) "eval --ctx 16K,x exits 1"
"$QGEN" emit --spec=specs/qwen2.5-0.5b.lua --arch=sm_90 --print > "$tmp/print2.txt" 2>&1
ok $(cmp -s <(grep -v " ms" "$tmp/print.txt") <(grep -v " ms" "$tmp/print2.txt"); echo $?) "--name=VALUE reads as --name VALUE"
QGEN_TEMPLATE_DIR="$tmp/none" "$QGEN" emit --spec specs/qwen2.5-0.5b.lua --arch sm_90 > /dev/null 2>"$tmp/err.txt"
ok $([ $? = 2 ] && grep -q "cannot open" "$tmp/err.txt"; echo $?) "a missing QGEN_TEMPLATE_DIR template is an internal error (exit 2) naming the file"
# Spec paths that are not plain files: a FIFO nobody writes must not hang (it is empty),
# a directory is refused by name, a pipe with a writer is read whole.
mkfifo "$tmp/fifo"
timeout 20 "$QGEN" emit --spec "$tmp/fifo" --arch sm_90 > /dev/null 2>"$tmp/err.txt"
ok $([ $? = 1 ] && grep -q "fifo" "$tmp/err.txt"; echo $?) "a FIFO without a writer as --spec exits 1 at once"
"$QGEN" emit --spec "$tmp" --arch sm_90 > /dev/null 2>"$tmp/err.txt"
ok $([ $? = 1 ] && grep -q "is a directory" "$tmp/err.txt"; echo $?) "a directory as --spec exits 1 (is a directory)"
timeout 60 "$QGEN" emit --spec <(cat specs/qwen2.5-0.5b.lua) --arch sm_90 > /dev/null 2>&1
ok $? "a spec through a pipe (<(...)) is read"

# QGEN_TUNE (base/plan.h): a tuned plan is other kernels under another key; malformed
# values and bundles of a tuned plan are refused with the reason.
QGEN_TUNE=groups=2,stages=3,sel=256 "$QGEN" emit --spec specs/qwen2.5-0.5b.lua --arch sm_90 --print > "$tmp/tuned.txt" 2>&1
ok $([ $? = 0 ] && grep -q "#define QG_STAGES 6" "$tmp/tuned.txt" && grep -q "#define QG_WARPS_T 2" "$tmp/tuned.txt" &&
  grep -q "#define QG_ATTEND_THREADS 96" "$tmp/tuned.txt" && grep -q "#define QG_SEL_THREADS 256" "$tmp/tuned.txt"; echo $?) \
  "QGEN_TUNE=groups=2,stages=3,sel=256 reaches the generated constants (a ring of 6, 2 consumer warps + producer)"
QGEN_TUNE=stages=2 "$QGEN" emit --spec specs/qwen3-4b.lua --variant qwen3-4b --arch sm_90 > "$tmp/tuned.txt" 2>&1
ok $([ $? = 0 ] && [ "$(grep -c ' miss$' "$tmp/tuned.txt")" = 1 ]; echo $?) "a tuned plan is a cache miss beside the default plan's entries"
for bad in stages=9 groups=0 groups=17 sel=300 frob=1 stages= "stages=2,"; do
  QGEN_TUNE="$bad" "$QGEN" emit --spec specs/qwen2.5-0.5b.lua --arch sm_90 > /dev/null 2>"$tmp/err.txt"
  ok $([ $? = 1 ] && grep -q "QGEN_TUNE" "$tmp/err.txt"; echo $?) "QGEN_TUNE='$bad' exits 1 and names the variable"
done
# qgen check takes a bundle as --spec (how sm_80 PTX runs on a newer GPU): it runs, or
# skips with 77 without a GPU, instead of failing to parse it as Lua.
"$QGEN" bundle --spec specs/qwen2.5-0.5b.lua --arch sm_80 -o "$tmp/b80.qgb" > /dev/null 2>&1
"$QGEN" check --spec "$tmp/b80.qgb" --quick > "$tmp/chk.txt" 2>&1
rc=$?
ok $({ [ $rc = 0 ] || [ $rc = 77 ]; } && grep -q "b80.qgb" "$tmp/chk.txt" && ! grep -qi "lua" "$tmp/chk.txt"; echo $?) "qgen check --spec BUNDLE runs the bundle's kernels (exit $rc)"
QGEN_TUNE=split=512 "$QGEN" bundle --spec specs/qwen2.5-0.5b.lua -o "$tmp/t.qgb" > /dev/null 2>"$tmp/err.txt"
ok $([ $? = 1 ] && grep -q "default plan" "$tmp/err.txt" && [ ! -e "$tmp/t.qgb" ]; echo $?) "qgen bundle refuses a tuned plan and writes nothing"
finish
