#!/usr/bin/env bash
# test_cli_safety.sh — what the command line refuses and how it fails: an output that is
# one of the inputs (bundle -o, emit -o DIR, eval --json, a redirection of stdout) is
# refused before anything is written; a write that fails (stdout on /dev/full, a --json
# file there) exits 3 with the reason, never 0; typos get a suggestion; eval --help
# explains its columns; without a GPU, eval points at --backend cpu.
# Env: QGEN (the binary), QGEN_SOURCE_DIR.
set -u
. "$(dirname "$0")/lib.sh"
spec=specs/qwen2.5-0.5b.lua
cp $spec "$tmp/s.lua"
sum() { cksum < "$1"; }
before=$(sum "$tmp/s.lua")

# ---- an output that is an input ----------------------------------------------------------
"$QGEN" bundle --spec "$tmp/s.lua" --arch sm_90 -o "$tmp/s.lua" > "$tmp/out.txt" 2> "$tmp/err.txt"; rc=$?
ok $([ $rc = 1 ] && grep -q "is the input" "$tmp/err.txt" && [ "$(sum "$tmp/s.lua")" = "$before" ] &&
  ! grep -q cubin "$tmp/out.txt"; echo $?) "bundle --spec s.lua -o s.lua: exit 1, the spec intact, nothing compiled"
ln "$tmp/s.lua" "$tmp/hard.lua"
"$QGEN" bundle --spec "$tmp/hard.lua" --arch sm_90 -o "$tmp/./s.lua" > /dev/null 2> "$tmp/err.txt"; rc=$?
ok $([ $rc = 1 ] && grep -q "is the input" "$tmp/err.txt" && [ "$(sum "$tmp/s.lua")" = "$before" ]; echo $?) \
  "bundle -o a hard link to the spec (another path, the same inode): refused"
"$QGEN" eval --spec "$tmp/s.lua" --json "$tmp/s.lua" --backend cpu --ctx 1K --trials 1 > /dev/null 2> "$tmp/err.txt"; rc=$?
ok $([ $rc = 1 ] && grep -q "is the input" "$tmp/err.txt" && [ "$(sum "$tmp/s.lua")" = "$before" ]; echo $?) \
  "eval --spec s.lua --json s.lua: exit 1 before evaluating, the spec intact"
# emit -o DIR where DIR holds the spec under the name of one of the outputs
"$QGEN" emit --spec $spec --arch sm_90 -o "$tmp/emit" > /dev/null 2>&1
cu=$(ls "$tmp/emit"/*.cu)
cp $spec "$cu"
rm -f "$tmp/emit"/*.ptx "$tmp/emit"/*.cubin
"$QGEN" emit --spec "$cu" --arch sm_90 -o "$tmp/emit" > "$tmp/out.txt" 2> "$tmp/err.txt"; rc=$?
ok $([ $rc = 1 ] && grep -q "is the input" "$tmp/err.txt" && cmp -s "$cu" $spec && [ -z "$(ls "$tmp/emit" | grep -v '\.cu$')" ]; echo $?) \
  "emit -o DIR with the spec at DIR/<uri>.cu: exit 1, the spec intact, nothing written"
"$QGEN" bundle --spec "$tmp/s.lua" --arch sm_90 -o "$tmp/b.qgb" > /dev/null 2>&1
cp "$tmp/b.qgb" "$tmp/b2.qgb"
"$QGEN" info "$tmp/b2.qgb" >> "$tmp/b2.qgb" 2> "$tmp/err.txt"; rc=$?
ok $([ $rc = 1 ] && grep -q "standard output is the input" "$tmp/err.txt" && cmp -s "$tmp/b.qgb" "$tmp/b2.qgb"; echo $?) \
  "info B >> B: refused, the bundle intact"

# ---- writes that fail ---------------------------------------------------------------------
if [ -w /dev/full ]; then
  for cmd in "version" "--help" "info --lua $tmp/b.qgb" "info $tmp/b.qgb" "cache list" "cache path" "emit --spec $spec --arch sm_90 --print"; do
    "$QGEN" $cmd > /dev/full 2> "$tmp/err.txt"; rc=$?
    ok $([ $rc = 3 ] && grep -q "cannot write to standard output: No space left on device" "$tmp/err.txt"; echo $?) \
      "qgen $cmd > /dev/full: exit 3 with the reason (exit $rc)"
  done
  "$QGEN" eval --spec $spec --backend cpu --ctx 1K --trials 1 --task niah_single --json /dev/full > /dev/null 2> "$tmp/err.txt"; rc=$?
  ok $([ $rc = 3 ] && grep -q "cannot write /dev/full: No space left on device" "$tmp/err.txt"; echo $?) \
    "eval --json /dev/full: exit 3 with the reason (exit $rc)"
else
  echo "skip the /dev/full checks (no writable /dev/full)"
fi
"$QGEN" version >&- 2> "$tmp/err.txt"; rc=$?
ok $([ $rc = 3 ] && grep -q "cannot write to standard output" "$tmp/err.txt"; echo $?) "qgen version with stdout closed: exit 3 (exit $rc)"
"$QGEN" --help | grep -q "^3 an output\|, 3 an output"; ok $? "qgen --help lists exit code 3"

# ---- typos -----------------------------------------------------------------------------
"$QGEN" emti --spec $spec > /dev/null 2> "$tmp/err.txt"; rc=$?
ok $([ $rc = 1 ] && grep -q "unknown command 'emti'; did you mean 'emit'?" "$tmp/err.txt"; echo $?) "qgen emti: did you mean 'emit'"
"$QGEN" emit $spec > /dev/null 2> "$tmp/err.txt"; rc=$?
ok $([ $rc = 1 ] && grep -q "did you mean --spec $spec?" "$tmp/err.txt"; echo $?) "qgen emit SPEC: did you mean --spec SPEC"
"$QGEN" bundle --spce $spec -o "$tmp/x.qgb" > /dev/null 2> "$tmp/err.txt"; rc=$?
ok $([ $rc = 1 ] && grep -q "unknown option '--spce'; did you mean --spec?" "$tmp/err.txt"; echo $?) "--spce: did you mean --spec"
"$QGEN" cache lsit > /dev/null 2> "$tmp/err.txt"; rc=$?
ok $([ $rc = 1 ] && grep -q "did you mean 'list'" "$tmp/err.txt"; echo $?) "qgen cache lsit: did you mean 'list'"
"$QGEN" frobnicate > /dev/null 2> "$tmp/err.txt"; rc=$?
ok $([ $rc = 1 ] && ! grep -q "did you mean" "$tmp/err.txt"; echo $?) "a word like no command gets no suggestion"

# ---- eval's help and its GPU-less message ------------------------------------------------
"$QGEN" eval --help > "$tmp/help.txt"
missing=""
for col in task ctx k_type cov selector margin trials recall needle mass mass_lo rel_err err_max err_tot pages need need_hi n_mass fails_at full_from; do
  grep -Eq "^  $col |^$col,|[ (]$col," "$tmp/help.txt" || missing="$missing $col"
done
ok $([ -z "$missing" ]; echo $?) "eval --help explains every column it prints (missing:${missing:- none})"
"$QGEN" eval --spec $spec --ctx 1K --trials 1 > "$tmp/out.txt" 2>&1; rc=$?
if [ $rc = 77 ]; then
  grep -q -- "--backend cpu" "$tmp/out.txt"; ok $? "eval without a GPU (exit 77) suggests --backend cpu"
else
  echo "skip the no-GPU message (eval found a GPU: exit $rc)"
fi
finish
