#!/usr/bin/env bash
# check-layers.sh — the folders are the layers (docs/DESIGN.md §1); this checks that the
# code keeps to them. Usage: bash tools/check-layers.sh [BUILD_DIR]
#   (a) a file of layer L includes ("X/...") only folders of layer L or below, in the order
#       base < ref < spec < jit < runtime < harness < tools; tests/ and fuzz/ may include any
#       layer; templates/ include only templates/. harness/ (workloads, eval, check, bench) is
#       a library under the command line: it includes runtime/ and below, never tools/, so
#       tests link it without the CLI and the CLI's option parsing stays out of it;
#   (b) runtime's private headers (everything in runtime/ but qgen.h and qgen_ext.h) are
#       included only from runtime/ and tests/;
#   (c) no include cycle between files (one cycle printed per strongly connected start);
#   (d) with BUILD_DIR: no object of a layer library (libqgen_<layer>.a) references a
#       symbol that only a higher layer's library defines (nm).
# Each violation is printed as "file:line: what" (line 0 when it has none); exit 1 on any.
set -euo pipefail
build=""
if [ $# -ge 1 ]; then build=$(cd "$1" && pwd) || { echo "check-layers: no build folder $1" >&2; exit 2; }; fi
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

layers="base ref spec jit runtime harness tools"
scanned="$layers tests fuzz"

# One record per quoted include: file <TAB> line <TAB> included name.
includes() {
  local dirs=() d
  for d in $scanned templates; do [ -d "$d" ] && dirs+=("$d"); done
  find "${dirs[@]}" -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) | sort |
    while read -r f; do
      case "$f" in templates/*) ;; *.cu|*.cuh) continue ;; esac
      grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" |
        sed -E 's/^([0-9]+):[^"]*"([^"]*)".*/\1\t\2/' | sed "s|^|$f\t|" || true
    done
}

# Every project file, so the awk program can resolve an include to a file.
files=$(find $scanned templates -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) 2>/dev/null | sort)

status=0
includes | awk -F'\t' -v layers="$layers" -v files="$files" '
  BEGIN {
    n = split(layers, L, " ")
    for (i = 1; i <= n; i++) rank[L[i]] = i
    nf = split(files, F, "\n")
    for (i = 1; i <= nf; i++) exists[F[i]] = 1
  }
  function top(p) { sub(/\/.*/, "", p); return p }
  function dir(p) { if (p !~ /\//) return ""; sub(/\/[^\/]*$/, "", p); return p "/" }
  function bad(file, line, what) { printf "%s:%s: %s\n", file, line, what; nbad++ }
  {
    file = $1; line = $2; inc = $3
    from = top(file); to = (inc ~ /\//) ? top(inc) : ""
    # (a) layer order
    if (from == "templates") {
      if (!exists[dir(file) inc] && to != "templates")
        bad(file, line, "includes \"" inc "\": templates include only templates/")
    } else if (from in rank && to != "") {
      if (to in rank) {
        if (rank[to] > rank[from])
          bad(file, line, "includes \"" inc "\": layer " to " is above " from " (order: base < ref < spec < jit < runtime < harness < tools)")
      } else if (to == "tests" || to == "fuzz" || to == "templates") {
        bad(file, line, "includes \"" inc "\": layer " from " may not include " to "/")
      }
    }
    # (b) runtime-private headers
    if (to == "runtime" && inc != "runtime/qgen.h" && inc != "runtime/qgen_ext.h" &&
        from != "runtime" && from != "tests")
      bad(file, line, "includes \"" inc "\": runtime-private header (only runtime/ and tests/; harness and tools use runtime/qgen_ext.h)")
    # the edge, resolved from the project root, else next to the including file
    target = exists[inc] ? inc : exists[dir(file) inc] ? dir(file) inc : ""
    if (target != "") { ne[file]++; edge[file, ne[file]] = target; eline[file, ne[file]] = line; nodes[file] = 1 }
  }
  # (c) cycles: depth-first search, colour 1 = on the stack, 2 = done.
  function dfs(u,   i, v, k, path) {
    colour[u] = 1; stack[++sp] = u
    for (i = 1; i <= ne[u]; i++) {
      v = edge[u, i]
      if (colour[v] == 1) {
        path = v
        for (k = sp; k >= 1 && stack[k] != v; k--) ;
        for (k++; k <= sp; k++) path = path " -> " stack[k]
        bad(u, eline[u, i], "include cycle: " path " -> " v)
      } else if (!colour[v]) dfs(v)
    }
    sp--; colour[u] = 2
  }
  END {
    for (u in nodes) if (!colour[u]) dfs(u)
    exit nbad > 0
  }
' || status=1

# (d) symbols: what each layer library needs against what the libraries define.
if [ -n "$build" ]; then
  prev=""
  for l in $layers; do
    lib=$(find "$build" -name "libqgen_$l.a" -print -quit 2>/dev/null || true)
    if [ -z "$lib" ]; then echo "check-layers: no libqgen_$l.a under $build; symbol check skipped" >&2; prev=""; break; fi
    prev="$prev $l=$lib"
  done
  if [ -n "$prev" ]; then
    for pair in $prev; do
      l=${pair%%=*} lib=${pair#*=}
      nm -A --defined-only "$lib" 2>/dev/null | awk -v l="$l" '$(NF-1) ~ /^[TDBRVWC]$/ {print l, $NF}'
    done >"${TMPDIR:-/tmp}/check-layers-def.$$"
    for pair in $prev; do
      l=${pair%%=*} lib=${pair#*=}
      nm -A -u "$lib" 2>/dev/null | awk -v l="$l" '{ o = $1; sub(/:[^:]*$/, "", o); sub(/.*[:\/]/, "", o); sub(/\.o(bj)?$/, "", o); print l, o, $NF }'
    done | awk -v layers="$layers" -v defs="${TMPDIR:-/tmp}/check-layers-def.$$" '
      BEGIN {
        n = split(layers, L, " "); for (i = 1; i <= n; i++) rank[L[i]] = i
        while ((getline ln < defs) > 0) { split(ln, a, " "); if (!(a[2] in lo) || rank[a[1]] < lo[a[2]]) { lo[a[2]] = rank[a[1]]; name[a[2]] = a[1] } }
      }
      { l = $1; src = $2; sym = $3
        if ((sym in lo) && lo[sym] > rank[l]) { printf "%s/%s:0: references %s, defined only in layer %s above %s\n", l, src, sym, name[sym], l; nbad++ } }
      END { exit nbad > 0 }
    ' || status=1
    rm -f "${TMPDIR:-/tmp}/check-layers-def.$$"
  fi
fi

if [ $status -ne 0 ]; then echo "check-layers: violations found" >&2; fi
exit $status
