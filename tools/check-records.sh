#!/usr/bin/env bash
# check-records.sh — the experiments record (experiments/README.md) and the code keep to it.
# Usage: bash tools/check-records.sh
#   (a) every experiment folder (a directory directly under experiments/ other than ncu/ and
#       gpu-logs/) has a CARD.md and a line in the index (the "## Index" table of
#       experiments/README.md links its folder);
#   (b) every folder an index line links exists, and so does every relative link target in
#       experiments/README.md;
#   (c) no code cites the notes or an issue by number: in C/CUDA/Python/shell/Lua/CMake
#       files (and scripts with a #! line) outside experiments/ and bench/results/ (data), no
#       line names NOTES.md, "NOTES <n>", "issue <n>", "must-show <n>", "PR <n>", "gh-<n>"
#       or "(#<n>)". A comment says why in its own words (the measured effect, the reason);
#       the card of the experiment holds the history.
# Each violation is printed as "path:line: what" (line 0 when it has none); exit 1 on any.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2
status=0
bad() { echo "$1"; status=1; }
index=experiments/README.md

if [ ! -f "$index" ]; then
  bad "$index:0: missing (the experiments index)"
else
  # The index: the lines of the "## Index" section's table.
  rows=$(awk '/^## /{inidx = ($0 == "## Index")} inidx && /^\|/' "$index")
  # (a) folders -> index
  for d in experiments/*/; do
    d=${d%/}; n=${d#experiments/}
    case $n in ncu | gpu-logs) continue ;; esac
    [ -f "$d/CARD.md" ] || bad "$d:0: no CARD.md"
    printf '%s\n' "$rows" | grep -qF "]($n/" || bad "$d:0: not in the index ($index)"
  done
  # (b) index -> folders: every folder an index row links, then every relative link target
  tmpf=$(mktemp)
  printf '%s\n' "$rows" | grep -oE '\]\([^)#]+\)' | sed -E 's/^\]\(//; s/\)$//; s#/.*##' | sort -u |
    while IFS= read -r n; do
      case $n in http:* | https:* | ..) continue ;; esac
      [ -d "experiments/$n" ] || echo "$index:0: the index names $n/, which does not exist"
    done > "$tmpf"
  grep -noE '\]\([^)]+\)' "$index" | while IFS= read -r m; do
    line=${m%%:*} t=${m#*:}; t=${t#](}; t=${t%)}; t=${t%%#*}
    case $t in '' | http:* | https:* | mailto:*) continue ;; esac
    [ -e "experiments/$t" ] || echo "$index:$line: links to $t, which does not exist"
  done >> "$tmpf"
  if [ -s "$tmpf" ]; then cat "$tmpf"; status=1; fi
  rm -f "$tmpf"
fi

# (c) citations in code
pat='NOTES\.md|NOTES[[:space:]]+(entr(y|ies)[[:space:]]+)?[0-9]|[Ii]ssues?[[:space:]]+#?[0-9]|[Mm]ust-shows?[[:space:]]+[0-9]|(^|[^[:alnum:]_])(PR|[Pp]ull request)[[:space:]]+#?[0-9]|(^|[^[:alnum:]_])gh-[0-9]|\(#[0-9]+\)'
code_files() {
  find . \( -path ./.git -o -path ./experiments -o -path ./bench/results -o -path './build*' -o -name node_modules \
    -o -name __pycache__ -o -path './.venv*' \) -prune -o -type f -print | sed 's#^\./##' | sort |
    while IFS= read -r f; do
      case $f in tools/check-records.sh | tests/test_check_records.sh) continue ;; esac
      case ${f##*/} in
      *.c | *.h | *.cc | *.cpp | *.cu | *.cuh | *.py | *.sh | *.bash | *.lua | *.cmake | CMakeLists.txt) echo "$f" ;;
      *.*) ;;
      *) [ "$(head -c 2 "$f" 2>/dev/null | tr -d '\000')" = '#!' ] && echo "$f" ;;
      esac
    done
}
hits=$(code_files | while IFS= read -r f; do grep -nE "$pat" "$f" 2>/dev/null | sed "s#^#$f:#"; done)
if [ -n "$hits" ]; then
  printf '%s\n' "$hits" | while IFS= read -r h; do
    f=${h%%:*} r=${h#*:}; n=${r%%:*} text=${r#*:}
    echo "$f:$n: cites the notes or an issue by number (say why instead): $(echo "$text" | sed -E 's/^[[:space:]]+//' | cut -c1-120)"
  done
  status=1
fi

if [ $status -ne 0 ]; then echo "check-records: violations found" >&2; fi
exit $status
