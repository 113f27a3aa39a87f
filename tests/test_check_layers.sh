#!/usr/bin/env bash
# test_check_layers.sh — tools/check-layers.sh passes on the tree (with the symbol check
# when $QGEN_BINARY_DIR holds the layer libraries) and fails, naming the violation, on a
# copy of the tree with one planted violation of each kind: a base file including
# runtime/qgen.h, a harness file including tools/opts.h (the library under the command
# line), a harness file including runtime/private.h, a two-file include cycle.
# Env: QGEN_SOURCE_DIR (default: the folder above this script), QGEN_BINARY_DIR (optional).
set -u
src=${QGEN_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { if [ "$1" = 0 ]; then pass=$((pass + 1)); echo "ok   $2"; else fail=$((fail + 1)); echo "FAIL $2"; fi; }

bash "$src/tools/check-layers.sh" ${QGEN_BINARY_DIR:+"$QGEN_BINARY_DIR"} > "$tmp/tree.txt" 2>&1
ok $? "the tree passes"
sed 's/^/     /' "$tmp/tree.txt"

# plant NAME WANT FILE LINE [FILE LINE ...]: a fresh copy of the sources with each LINE
# appended to its FILE must exit 1 and print a line matching the extended regex WANT.
plant() {
  local name=$1 want=$2 d="$tmp/$1"
  shift 2
  mkdir -p "$d"
  (cd "$src" && cp -r base ref spec jit runtime harness tools tests fuzz templates "$d"/)
  while [ $# -ge 2 ]; do echo "$2" >> "$d/$1"; shift 2; done
  bash "$d/tools/check-layers.sh" > "$d.txt" 2>&1
  local rc=$?
  ok $([ "$rc" = 1 ] && grep -qE "$want" "$d.txt"; echo $?) "$name: exit 1 with /$want/ (rc $rc: $(grep -E "$want" "$d.txt" | head -1))"
}
n=$(($(wc -l < "$src/base/util.h") + 1))
plant upward "^base/util.h:$n: includes \"runtime/qgen.h\": layer runtime is above base" base/util.h '#include "runtime/qgen.h"'
n=$(($(wc -l < "$src/harness/eval.h") + 1))
plant harness "^harness/eval.h:$n: includes \"tools/opts.h\": layer tools is above harness" harness/eval.h '#include "tools/opts.h"'
n=$(($(wc -l < "$src/harness/workload.h") + 1))
plant private "^harness/workload.h:$n: includes \"runtime/private.h\": runtime-private header" harness/workload.h '#include "runtime/private.h"'
plant cycle '^jit/(artifact|cache)\.h:[0-9]+: include cycle: jit/(artifact|cache)\.h -> jit/(artifact|cache)\.h -> jit/(artifact|cache)\.h$' \
  jit/cache.h '#include "jit/artifact.h"' jit/artifact.h '#include "jit/cache.h"'

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
