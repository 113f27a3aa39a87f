#!/usr/bin/env bash
# test_spec_doc.sh — docs/spec.md tells the truth about the spec fields, and docs/ links go
# somewhere:
#   (a) the tables between docs/spec.md's "spec-fields: begin" and "spec-fields: end"
#       markers are exactly what `qgen spec-fields` prints (the validator's own table);
#   (b) every relative link in docs/*.md names a file that exists, and a "#anchor" into a
#       markdown file names one of its headings (GitHub's heading ids).
# Env: QGEN (the binary), QGEN_SOURCE_DIR.
set -u
export LC_ALL=C
if [ -z "${QGEN:-}" ] || [ ! -x "$QGEN" ]; then
  echo "QGEN is not set to an executable qgen binary; skipping"
  exit 77
fi
src=${QGEN_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/qgen_spec_doc.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
pass=0
ok() {
  if [ "$1" = 0 ]; then pass=$((pass + 1)); echo "ok   $2"; else fail=$((fail + 1)); echo "FAIL $2"; fi
}

# (a) the field table
doc=$src/docs/spec.md
"$QGEN" spec-fields > "$tmp/code.md"
ok $? "qgen spec-fields exits 0"
awk '/<!-- spec-fields: end/ {inside = 0} inside {print} /<!-- spec-fields: begin/ {inside = 1}' "$doc" > "$tmp/doc.md"
if [ -s "$tmp/doc.md" ] && cmp -s "$tmp/code.md" "$tmp/doc.md"; then
  ok 0 "docs/spec.md's field tables equal qgen spec-fields ($(wc -l < "$tmp/code.md") lines)"
else
  ok 1 "docs/spec.md's field tables equal qgen spec-fields; the differences (< code, > doc):"
  diff "$tmp/code.md" "$tmp/doc.md" | head -40
  echo "     to update the doc, replace the lines between its spec-fields markers with the output of qgen spec-fields"
fi

# (b) links: the heading ids of a markdown file, one a line
ids() {
  grep -E '^#+ ' "$1" | sed -E 's/^#+ +//' | tr 'A-Z' 'a-z' | sed -E 's/[^a-z0-9 _-]//g; s/ /-/g'
}
n=0
bad=0
for md in "$src"/docs/*.md; do
  dir=$(dirname "$md")
  while IFS= read -r link; do
    target=${link%%#*} anchor=""
    case $link in *'#'*) anchor=${link#*#} ;; esac
    case $target in http:* | https:* | mailto:*) continue ;; esac
    n=$((n + 1))
    file=$md
    [ -n "$target" ] && file=$dir/$target
    if [ ! -e "$file" ]; then
      echo "     ${md#"$src"/}: links to $link: no such file"
      bad=$((bad + 1))
    elif [ -n "$anchor" ] && [ "${file%.md}" != "$file" ] && ! ids "$file" | grep -qxF -- "$anchor"; then
      echo "     ${md#"$src"/}: links to $link: no such heading"
      bad=$((bad + 1))
    fi
  done < <(grep -oE '\]\([^) ]+\)' "$md" | sed -E 's/^\]\(//; s/\)$//')
done
ok $([ $bad = 0 ]; echo $?) "the $n relative links of docs/*.md resolve ($bad do not)"

echo "$pass passed, $fail failed"
[ $fail = 0 ]
