#!/usr/bin/env bash
# test_check_records.sh — tools/check-records.sh passes on the tree and fails, naming the
# violation, on a copy of the tree with one planted violation of each kind: an experiment
# folder missing from the index, an index line naming a folder that does not exist, a folder
# without its CARD.md, and code that cites the notes or an issue by number (a C comment, a
# Python comment, a shell comment in a #! script without an extension).
# Env: QGEN_SOURCE_DIR (default: the folder above this script).
set -u
src=${QGEN_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { if [ "$1" = 0 ]; then pass=$((pass + 1)); echo "ok   $2"; else fail=$((fail + 1)); echo "FAIL $2"; fi; }

bash "$src/tools/check-records.sh" > "$tmp/tree.txt" 2>&1
ok $? "the tree passes"
sed 's/^/     /' "$tmp/tree.txt"

# copy DIR: the code and the record's index and cards (not the experiments' data) into DIR
copy() {
  mkdir -p "$1/experiments"
  (cd "$src" && tar cf - --exclude=./experiments --exclude=./bench/results --exclude='./build*' --exclude=./.git .) |
    (cd "$1" && tar xf -)
  cp "$src/experiments/README.md" "$1/experiments/"
  local d
  for d in "$src"/experiments/*/; do
    d=${d%/}; mkdir -p "$1/experiments/${d##*/}"
    [ -f "$d/CARD.md" ] && cp "$d/CARD.md" "$1/experiments/${d##*/}/"
    [ -f "$d/README.md" ] && cp "$d/README.md" "$1/experiments/${d##*/}/"
  done
}
# plant NAME WANT CMD: a fresh copy with CMD run in it must exit 1 and print a line
# matching the extended regex WANT.
plant() {
  local name=$1 want=$2 d="$tmp/$1"
  copy "$d"
  (cd "$d" && eval "$3")
  bash "$d/tools/check-records.sh" > "$d.txt" 2>&1
  local rc=$?
  ok $([ "$rc" = 1 ] && grep -qE "$want" "$d.txt"; echo $?) "$name: exit 1 with /$want/ (rc $rc: $(grep -E "$want" "$d.txt" | head -1))"
}
plant unindexed '^experiments/2099-01-01-planted:0: not in the index' \
  'mkdir experiments/2099-01-01-planted && echo "# planted" > experiments/2099-01-01-planted/CARD.md'
plant missing '^experiments/README.md:0: the index names 2099-01-02-missing/, which does not exist' \
  "sed -i '/^|---|---|---|---|---|---|\$/a | [E99](2099-01-02-missing/CARD.md) | 2099-01-02 | planted | - | measured | - |' experiments/README.md"
plant nocard '^experiments/2026-11-29-first-version:0: no CARD.md' 'rm experiments/2026-11-29-first-version/CARD.md'
n=$(($(wc -l < "$src/base/util.h") + 1))
plant c-notes "^base/util.h:$n: cites the notes" 'echo "/* 2 % faster (NOTES 12) */" >> base/util.h'
n=$(($(wc -l < "$src/bench/targets.py") + 1))
plant py-issue "^bench/targets.py:$n: cites the notes or an issue" 'echo "# see issue 7" >> bench/targets.py'
n=$(($(wc -l < "$src/.ci/run") + 1))
plant script-must-show "^\.ci/run:$n: cites" 'echo "# must-show 3 of the plan" >> .ci/run'

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
