#!/usr/bin/env bash
# test_emit.sh — `qgen emit` end to end (no GPU needed): the main spec writes its unit,
# cubins for sm_80 and sm_90 and the PTX, compiling every kernel; a second run is all cache
# hits; every spec in specs/ and tests/gpu/ emits (with QGEN_TEST_QUICK, the sanitizer pass:
# every variant planned, the first and the last of each spec compiled); bad arguments exit 1
# (the option parser of every command); FIFO, directory and pipe spec paths; QGEN_TUNE.
# Env: QGEN (the binary), QGEN_SOURCE_DIR.
set -u
. "$(dirname "$0")/lib.sh"

"$QGEN" emit --spec specs/qwen3-4b.lua -o "$tmp/out" > "$tmp/first.txt" 2>&1
ok $? "emit specs/qwen3-4b.lua -o DIR exits 0"
n_cu=$(ls "$tmp/out"/*.cu 2>/dev/null | grep -vc '_sm[0-9]*\.cu$')
n_cubin=$(ls "$tmp/out"/*_sm80.cubin "$tmp/out"/*_sm90.cubin 2>/dev/null | wc -l)
n_ptx=$(ls "$tmp/out"/*.ptx 2>/dev/null | wc -l)
ok $([ "$n_cu" = 4 ] && [ "$n_cubin" = 8 ] && [ "$n_ptx" = 4 ]; echo $?) "writes 4 units, 8 cubins (sm_80, sm_90), 4 PTX files for the 4 variants (got $n_cu/$n_cubin/$n_ptx)"
# an arch whose limits give another plan gets its own unit (NAME_smNN.cu), announced, and it
# differs from the first arch's; an arch whose plan is the same gets none
n_arch_cu=$(ls "$tmp/out"/*_sm[0-9]*.cu 2>/dev/null | wc -l)
n_said=$(grep -c "'s plan differs)$" "$tmp/first.txt")
same=0
for f in "$tmp/out"/*_sm[0-9]*.cu; do
  [ -e "$f" ] || continue
  cmp -s "$f" "${f%_sm[0-9]*.cu}.cu" && same=$((same + 1))
done
ok $([ "$n_arch_cu" = "$n_said" ] && [ "$same" = 0 ]; echo $?) "a unit per arch whose plan differs, each announced and different ($n_arch_cu files, $n_said announced, $same identical)"
n=$(grep -cE "sm_(80|90) +module +cubin [0-9]+ B .* ms +miss$" "$tmp/first.txt")
ok $([ "$n" = 8 ] && echo 0 || echo 1) "one module compiled per variant and arch, its cubin size and time on its own line ($n of 8)"
for k in qg_append qg_estimate qg_select qg_attend; do
  n=$(grep -cE "sm_(80|90) +$k +regs .* smem [0-9]+ static \+ [0-9]+ dynamic$" "$tmp/first.txt")
  ok $([ "$n" = 8 ] && echo 0 || echo 1) "kernel $k reported for sm_80 and sm_90 in every variant ($n of 8 lines)"
done
# the dynamic shared memory attend launches with (the plan), not only ptxas' static 208 B
grep -qE "sm_90 +qg_attend .* smem [0-9]+ static \+ [1-9][0-9]{4,} dynamic$" "$tmp/first.txt"
ok $? "attend's line shows the dynamic shared memory of its launch"
grep -q "spill 0/0" "$tmp/first.txt"; ok $? "ptxas report (registers, spills) printed"
grep -q "cache per token per layer: 4096 bytes" "$tmp/first.txt"; ok $? "bytes per token of the layout printed"
grep -q "#define QG_HEAD_DIM 128" "$tmp/out"/qwen3-4b_d128_*_if16_of16_b64_sparse_i8.cu; ok $? "the unit starts with the generated constants"

t0=$(date +%s%N)
"$QGEN" emit --spec specs/qwen3-4b.lua > "$tmp/second.txt" 2>&1
rc=$?
t1=$(date +%s%N)
ok $rc "second emit exits 0"
misses=$(grep -c " miss$" "$tmp/second.txt")
hits=$(grep -c " hit$" "$tmp/second.txt")
ok $([ "$misses" = 0 ] && [ "$hits" = 8 ]; echo $?) "second emit is all cache hits ($hits hits, $misses misses; $(((t1 - t0) / 1000000)) ms)"

quick=0
case ${QGEN_TEST_QUICK:-0} in "" | 0) ;; *) quick=1 ;; esac
for s in specs/*.lua tests/gpu/*.lua; do
  if [ $quick = 0 ]; then
    "$QGEN" emit --spec "$s" > "$tmp/all.txt" 2>&1
    ok $? "emit $s"
    continue
  fi
  # quick: NVRTC's time on a hundred variants finds nothing more in qgen's own code
  "$QGEN" emit --spec "$s" --plan > "$tmp/plan.txt" 2>&1
  ok $? "emit --plan $s"
  for v in $(awk -v f="($s):" '$2 == f { n++; if (n == 1) print $1; last = $1 } END { if (n > 1) print last }' "$tmp/plan.txt"); do
    "$QGEN" emit --spec "$s" --variant "$v" > "$tmp/all.txt" 2>&1
    rc=$?
    ok $rc "emit $s --variant $v (exit $rc)"
    [ $rc = 0 ] || tail -n 20 "$tmp/all.txt" # what went wrong, in the test's own log
  done
done

"$QGEN" emit --spec specs/qwen2.5-0.5b.lua --print --arch sm_90 > "$tmp/print.txt" 2>&1
grep -q "extern \"C\" __global__ void" "$tmp/print.txt"; ok $? "--print writes the unit to stdout"
"$QGEN" emit --spec tests/gpu/rescore.lua --variant qwen3-4b-f16-r4-p0.9 --print 2>&1 > /dev/null | grep -q "4 x the budget's pages rescored from a q4_0 sketch of K, then a top-p cut at p = 0.9"
ok $? "emit's summary names the two-stage selection and its top-p cut"
# whole-number floats of a spec (scale = 1, sparse.v_tau = 1) are C++ literals ("1.0f", not "1f")
cat > "$tmp/whole.lua" <<'EOF2'
return spec{ name = 'whole', head_dim = 64, n_head = 8, n_head_kv = 2, scale = 1, sparse = { block = 32, v_tau = 1 } }
EOF2
"$QGEN" emit --spec "$tmp/whole.lua" --arch sm_90 --print > "$tmp/whole.txt" 2>&1
ok $([ $? = 0 ] && grep -q "^#define QG_SCALE 1.0f$" "$tmp/whole.txt" && grep -q "^#define QG_V_TAU 1.0f$" "$tmp/whole.txt"; echo $?) \
  "scale = 1 and sparse.v_tau = 1 compile (QG_SCALE 1.0f, QG_V_TAU 1.0f)"
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
echo "return spec{ name = 'b', head_dim = 64, n_head = 8, n_head_kv = 2, sparse = { bounds = 'i4' } }" > "$tmp/bounds_i4.lua"
for cmd in eval bench check; do
  "$QGEN" $cmd --spec "$tmp/bounds_i4.lua" > /dev/null 2>"$tmp/err.txt"
  ok $([ $? = 1 ] && grep -q "sparse.bounds" "$tmp/err.txt"; echo $?) "$cmd of a bad spec (sparse.bounds = 'i4') exits 1 naming the field"
done
for a in --trials --proj-dim --chunk; do
  "$QGEN" eval --spec specs/qwen3-4b.lua --backend cpu $a 0 -q > /dev/null 2>"$tmp/err.txt"
  ok $([ $? = 1 ] && grep -q -- "$a 0" "$tmp/err.txt"; echo $?) "eval $a 0 exits 1 naming $a"
done
# Workload knobs out of their range are refused by name, whether or not the run would use them.
for k in multikey=0 multikey=17 sink_mass=1 topic_len=0 recent_tau=0 rope_base=0.5 logit_std=-1 owners=1.5 drift=2 drift drift=x; do
  "$QGEN" eval --spec specs/qwen3-4b.lua --backend cpu --wl $k -q > /dev/null 2>"$tmp/err.txt"
  ok $([ $? = 1 ] && grep -q "': ${k%%=*}" "$tmp/err.txt"; echo $?) "eval --wl $k exits 1 naming the knob"
done
"$QGEN" eval --spec specs/qwen3-4b.lua --backend cpu --wl bogus=1 -q > /dev/null 2>"$tmp/err.txt"
ok $([ $? = 1 ] && grep -q "no workload knob 'bogus'" "$tmp/err.txt"; echo $?) "eval --wl bogus=1 exits 1: no such knob"
for a in "--threads 0" "--threads -3" "--top-p 1.5" "--top-p 0" "--steps 0" "--reselect 0" "--steps 2 --wl drift=2" "--v-tau -1" "--v-tau 2" \
  "--selector quest,quest" "--task niah_single,niah_single" "--selector quest,,oracle" "--task niah_single," \
  "--variant ,qwen3-4b"; do
  "$QGEN" eval --spec specs/qwen3-4b.lua --backend cpu $a -q > /dev/null 2>&1; ok $([ $? = 1 ]; echo $?) "eval $a exits 1"
done
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
# estsel=1 builds qg_estsel (estimate and select in one launch; opt-in): on sm_90 its code,
# without spills; by default an empty kernel
QGEN_TUNE=estsel=1 "$QGEN" emit --spec specs/qwen3-4b.lua --variant qwen3-4b-q4_0 --arch sm_90 > "$tmp/tuned.txt" 2>&1
ok $([ $? = 0 ] && awk '$2 == "qg_estsel" && $4 > 32 && $6 == "0/0" && $8 == 0 { n++ } END { exit n != 1 }' "$tmp/tuned.txt"; echo $?) \
  "QGEN_TUNE=estsel=1: qg_estsel built for sm_90, no spills ($(awk '$2 == "qg_estsel"' "$tmp/tuned.txt"))"
# persist=2 builds the persistent attend (opt-in): its constant and two query buffers beside
# the ring, for sm_90 and for the 99 KiB sm_86, without spills (q4_0's pairs: 128 registers)
QGEN_TUNE=persist=2 "$QGEN" emit --spec specs/qwen3-4b.lua --variant qwen3-4b-q4_0 --arch sm_90,sm_86 > "$tmp/tuned.txt" 2>&1
ok $([ $? = 0 ] && awk '$2 == "qg_attend" && $6 == "0/0" && $8 == 0 { n++ } END { exit n != 2 }' "$tmp/tuned.txt"; echo $?) \
  "QGEN_TUNE=persist=2: the persistent qg_attend built for sm_90 and sm_86, no spills ($(awk '$2 == "qg_attend"' "$tmp/tuned.txt" | tr -s ' '))"
QGEN_TUNE=persist=2 "$QGEN" emit --spec specs/qwen3-4b.lua --variant qwen3-4b --arch sm_90 --print 2>/dev/null | grep -q "#define QG_PERSIST 2"
ok $? "QGEN_TUNE=persist=2 reaches the generated constants (QG_PERSIST 2)"
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
# --variant names one of the spec's variants, for every command, before a GPU is looked for:
# a wrong or empty name exits 1 and lists them.
list="variants: qwen3-4b, qwen3-4b-q8_0, qwen3-4b-q4_0, qwen3-4b-q5_0"
for c in emit "bundle -o $tmp/v.qgb" check bench eval; do
  for v in nope ""; do
    "$QGEN" ${c} --spec specs/qwen3-4b.lua --variant="$v" > /dev/null 2>"$tmp/err.txt"; rc=$?
    want=$([ "$c" = eval ] && [ -z "$v" ] && echo "names expected" || echo "no variant named '$v'; $list")
    ok $([ $rc = 1 ] && grep -q "$want" "$tmp/err.txt"; echo $?) "${c%% *} --variant '$v' exits 1: $want"
  done
done
for c in eval bench; do
  "$QGEN" $c --spec specs/qwen3-4b.lua --variant qwen3-4b,nope > /dev/null 2>"$tmp/err.txt"
  ok $([ $? = 1 ] && grep -q "no variant named 'nope'; $list" "$tmp/err.txt"; echo $?) "$c checks every name of its --variant list"
  for v in qwen3-4b,,qwen3-4b-q8_0 qwen3-4b,qwen3-4b; do
    "$QGEN" $c --spec specs/qwen3-4b.lua --variant $v > /dev/null 2>"$tmp/err.txt"
    ok $([ $? = 1 ] && grep -q "names expected" "$tmp/err.txt"; echo $?) "$c --variant $v exits 1: an empty or repeated name"
  done
done

# Arguments are checked before a GPU is looked for (exit 1, not 77), per option.
for a in "--ctx 0" "--ctx 16K,-1" "--batch 0" "--coverage 2" "--coverage 0" "--runs 0" "--warmup -1" "--mem-gib 0" \
         "--json /nonexistent/x"; do
  "$QGEN" bench --spec specs/qwen3-4b.lua $a > /dev/null 2>"$tmp/err.txt"; rc=$?
  ok $([ $rc = 1 ] && grep -q -- "qgen: bench: ${a%% *}" "$tmp/err.txt"; echo $?) "bench $a exits 1 naming the option (exit $rc)"
done
for a in "--seed -5" "--seed abc" "--seed 99999999999999999999999"; do
  "$QGEN" check --spec specs/qwen3-4b.lua $a > /dev/null 2>"$tmp/err.txt"
  ok $([ $? = 1 ] && grep -q "\-\-seed" "$tmp/err.txt"; echo $?) "check $a exits 1"
done
# bench --jit without a GPU: 77, its temporary cache directory removed, plain messages
if ! "$QGEN" check --spec specs/qwen2.5-0.5b.lua --quick --variant qwen2.5-0.5b > /dev/null 2>&1; then
  before=$(ls -d /tmp/qgen-bench-jit-* 2>/dev/null | wc -l)
  "$QGEN" bench --spec specs/qwen3-4b.lua --jit > "$tmp/out.txt" 2>&1; rc=$?
  after=$(ls -d /tmp/qgen-bench-jit-* 2>/dev/null | wc -l)
  ok $([ $rc = 77 ] && [ "$after" = "$before" ] && ! grep -qE '\(&|qgen_open\(|^qgen bench: st:' "$tmp/out.txt"; echo $?) \
    "bench --jit without a GPU: exit 77 ($rc), no directory left ($before -> $after), no C in the message"
  "$QGEN" bench --spec specs/nope.lua > /dev/null 2>"$tmp/err.txt"
  ok $([ $? = 1 ] && grep -q "^qgen: bench: specs/nope.lua: cannot open" "$tmp/err.txt"; echo $?) "bench on a missing spec: exit 1, plain words"
fi

# QGEN_NVRTC names the library to use: one that cannot be loaded is an error naming it
# (exit 2), never a silent fallback to the system's; version says which file it loaded.
for bad in /bogus/libnvrtc.so /etc/passwd /tmp; do
  QGEN_NVRTC=$bad "$QGEN" emit --spec specs/qwen2.5-0.5b.lua --arch sm_90 > /dev/null 2>"$tmp/err.txt"
  ok $([ $? = 2 ] && grep -q "QGEN_NVRTC=$bad: cannot load" "$tmp/err.txt"; echo $?) "QGEN_NVRTC=$bad: emit exits 2 naming it"
  QGEN_NVRTC=$bad "$QGEN" version | grep -q "^nvrtc none (QGEN_NVRTC=$bad: cannot load"
  ok $? "QGEN_NVRTC=$bad: version says none, and why"
done
QGEN_NVRTC=none "$QGEN" version | grep -q "^nvrtc none"; ok $? "QGEN_NVRTC=none: never loaded"
"$QGEN" version | grep -qE "^nvrtc [0-9]+\.[0-9]+ /.*libnvrtc"; ok $? "version prints the NVRTC library file it loaded"

# Text on stdout, the report on stderr: info --lua is a spec file, emit --print a CUDA unit.
"$QGEN" bundle --spec specs/qwen3-4b.lua --variant qwen3-4b --arch sm_90 -o "$tmp/q.qgb" > /dev/null 2>&1
"$QGEN" info --lua "$tmp/q.qgb" > "$tmp/s.lua" 2>/dev/null && "$QGEN" emit --spec "$tmp/s.lua" --arch sm_90 > /dev/null 2>&1
ok $? "qgen info --lua B > s.lua && qgen emit --spec s.lua"
"$QGEN" emit --spec specs/qwen2.5-0.5b.lua --arch sm_90 --print > "$tmp/u.cu" 2>"$tmp/rep.txt"
ok $(head -1 "$tmp/u.cu" | grep -q "^// generated by qgen" && ! grep -qE "^  sm_|cache per token|arch\(s\) in" "$tmp/u.cu" &&
  grep -q "qg_attend" "$tmp/rep.txt"; echo $?) "emit --print > u.cu: the unit alone on stdout, the report on stderr"

# --arch: no empty items, no arch twice (emit and bundle alike)
for c in emit "bundle -o $tmp/a.qgb"; do
  for a in sm_90,sm_90 sm_90, ,sm_90 sm_80,,sm_90 ""; do
    "$QGEN" $c --spec specs/qwen2.5-0.5b.lua --arch="$a" > /dev/null 2>"$tmp/err.txt"
    ok $([ $? = 1 ] && grep -q "\-\-arch '$a'" "$tmp/err.txt"; echo $?) "${c%% *} --arch '$a' exits 1"
  done
done
"$QGEN" emit --spec "$tmp/q.qgb" > /dev/null 2>"$tmp/err.txt"
ok $([ $? = 1 ] && grep -q "is a bundle, not a spec" "$tmp/err.txt"; echo $?) "emit --spec BUNDLE says it is a bundle"
# environment: QGEN_CACHE takes on/off/1/0 only; QGEN_TUNE is checked only where a plan is
# made, each key once; a relative QGEN_CACHE_DIR is resolved and 'cache path' makes nothing
QGEN_CACHE=garbage "$QGEN" emit --spec specs/qwen2.5-0.5b.lua --arch sm_90 > /dev/null 2>"$tmp/err.txt"
ok $([ $? = 1 ] && grep -q "QGEN_CACHE='garbage': expected on, off, 1 or 0" "$tmp/err.txt"; echo $?) "QGEN_CACHE=garbage is refused"
for v in on ON 1 off 0; do QGEN_CACHE=$v "$QGEN" cache path > /dev/null; ok $? "QGEN_CACHE=$v is accepted"; done
QGEN_TUNE=garbage "$QGEN" version > /dev/null; ok $? "QGEN_TUNE=garbage does not fail qgen version"
QGEN_TUNE=stages=2,stages=3 "$QGEN" emit --spec specs/qwen2.5-0.5b.lua > /dev/null 2>"$tmp/err.txt"
ok $([ $? = 1 ] && grep -q "'stages' is given twice" "$tmp/err.txt"; echo $?) "a key given twice in QGEN_TUNE is refused"
(cd "$tmp" && QGEN_CACHE_DIR=rel "$QGEN" cache path > "$tmp/path.txt")
ok $([ "$(cat "$tmp/path.txt")" = "$tmp/rel" ] && [ ! -e "$tmp/rel" ]; echo $?) "QGEN_CACHE_DIR=rel: cache path prints \$PWD/rel and creates nothing"
# architectures: a plan per arch, refusals before anything is compiled
"$QGEN" emit --spec specs/qwen3-4b.lua --variant qwen3-4b --plan --arch sm_80,sm_86,sm_90,sm_120 > "$tmp/plan.txt" 2>&1
ok $([ $? = 0 ] && grep -qE "^  sm_86 +attend 3 token groups x 3 stages.* 78208 bytes.*select 21248 keys" "$tmp/plan.txt" &&
  grep -qE "^  sm_90 +attend 3 token groups x 4 stages.* 102784 bytes.*select 24576 keys" "$tmp/plan.txt"; echo $?) \
  "emit --plan: qwen3-4b f16 is 3 x 3 stages on sm_86, 3 x 4 on sm_90 (nothing compiled)"
printf 'return spec{ name = "big", head_dim = 256, n_head = 64, n_head_kv = 1, in_type = "f32", k_type = "q8_0", sparse = true }\n' > "$tmp/big.lua"
"$QGEN" emit --spec "$tmp/big.lua" --arch sm_90,sm_89 -o "$tmp/bigout" > /dev/null 2>"$tmp/err.txt"
ok $([ $? = 1 ] && grep -q "variant 'big' does not fit sm_89: qg_estimate needs 133376 bytes" "$tmp/err.txt" &&
  grep -q "allows 101376" "$tmp/err.txt" && [ -z "$(ls "$tmp/bigout" 2>/dev/null)" ]; echo $?) \
  "emit --arch sm_89 of a spec that does not fit 99 KiB: exit 1 naming the kernel, bytes and limit, nothing written"
"$QGEN" emit --spec "$tmp/big.lua" --plan --arch sm_90,sm_120 > "$tmp/plan.txt" 2>&1
ok $([ $? = 0 ] && grep -q "sm_120 does not fit: qg_estimate needs 133376" "$tmp/plan.txt" && grep -qE "^  sm_90 +attend" "$tmp/plan.txt"; echo $?) \
  "emit --plan reports the arch it does not fit and plans the others"
"$QGEN" emit --spec "$tmp/big.lua" --plan --print > /dev/null 2>"$tmp/err.txt"
ok $([ $? = 1 ] && grep -q "\-\-plan compiles and writes nothing" "$tmp/err.txt"; echo $?) "emit --plan with --print is refused"
# help
"$QGEN" version --help | grep -q "^usage: qgen version"; ok $? "version --help prints its usage"
"$QGEN" help > "$tmp/help.txt"; ok $? "qgen help exits 0"
ok $(cmp -s "$tmp/help.txt" <("$QGEN" --help); echo $?) "qgen help = qgen --help"
ok $(cmp -s <("$QGEN" help bundle) <("$QGEN" bundle --help); echo $?) "qgen help bundle = qgen bundle --help"
for v in QGEN_QUIET QGEN_TUNE CUDA_PATH QGEN_NVRTC QGEN_CACHE_DIR; do grep -q "^  $v " "$tmp/help.txt"; ok $? "qgen --help lists $v"; done
# eval on a spec with a token budget uses that budget (512 of 4096 tokens = coverage 0.125)
printf 'return spec{ name = "bud", head_dim = 64, n_head = 4, n_head_kv = 2, sparse = { block = 64, budget = 512 } }\n' > "$tmp/bud.lua"
"$QGEN" eval --spec "$tmp/bud.lua" --backend cpu --ctx 4096 --trials 1 --task niah_single --selector quest --ref-ctx -1 -q > "$tmp/ev.txt" 2>&1
ok $([ $? = 0 ] && grep -qE "^niah_single +4K f16\+i8 +0.125 quest" "$tmp/ev.txt"; echo $?) "eval on a budget spec: coverage 512/4096 = 0.125"
"$QGEN" eval --spec "$tmp/bud.lua" --backend cpu --ctx 4096,8192 -q > /dev/null 2>"$tmp/err.txt"
ok $([ $? = 1 ] && grep -q "budget of 512 tokens" "$tmp/err.txt"; echo $?) "... several contexts need --coverage"
finish
