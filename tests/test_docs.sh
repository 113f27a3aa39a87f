#!/usr/bin/env bash
# test_docs.sh — the README and docs/ keep to what they promise:
#   - every relative link in README.md, docs/*.md and python/README.md names a file or folder
#     that exists, and a #fragment of a Markdown file one of its headings (GitHub's anchors);
#   - the consumer-card table in docs/gpus.md (between its consumer-table markers) is what
#     bench/consumer_table.py prints, and that script's cache bytes a token are what
#     `qgen emit --plan` prints for the models' specs ($QGEN; skipped without it);
#   - README.md is at most 250 lines (a product page; the reference is docs/);
#   - neither cites the experiment notes or an issue by number (the experiments record does).
# Env: QGEN_SOURCE_DIR (default: the folder above this script), QGEN (the built qgen), QGEN_PYTHON.
set -u
src=${QGEN_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$src" || exit 1
py=${QGEN_PYTHON:-/usr/bin/python3}
[ -x "$py" ] || py=python3
pass=0 fail=0
ok() { if [ "$1" = 0 ]; then pass=$((pass + 1)); echo "ok   $2"; else fail=$((fail + 1)); echo "FAIL $2"; fi; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
docs="README.md docs/*.md python/README.md"

# relative links and their anchors
"$py" - $docs > "$tmp/links.txt" <<'EOF'
import os, re, sys, unicodedata

def anchors(path):
    """GitHub's heading anchors of a Markdown file: lower case, punctuation dropped, spaces
    to hyphens, -1, -2 ... for repeats (fenced code is not headings)."""
    seen, out, fence = {}, set(), False
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"):
            fence = not fence
        if fence or not line.startswith("#"):
            continue
        text = re.sub(r"`([^`]*)`", r"\1", line.lstrip("#").strip()).lower()
        slug = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN").replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out

bad = 0
for doc in sys.argv[1:]:
    fence = False
    for no, line in enumerate(open(doc, encoding="utf-8"), 1):
        if line.startswith("```"):
            fence = not fence
        if fence:
            continue
        for target in re.findall(r"\]\(([^)\s]+)\)", line):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, frag = target.partition("#")
            full = os.path.normpath(os.path.join(os.path.dirname(doc), path)) if path else doc
            if not os.path.exists(full):
                print(f"{doc}:{no}: links to {target}: {full} does not exist"); bad += 1
            elif frag and full.endswith(".md") and frag not in anchors(full):
                print(f"{doc}:{no}: links to {target}: {full} has no heading #{frag}"); bad += 1
print(f"{bad} broken")
sys.exit(1 if bad else 0)
EOF
r=$?
ok $r "every relative link of $(echo $docs | wc -w) pages resolves ($(tail -1 "$tmp/links.txt"))"
[ $r = 0 ] || sed '$d; s/^/     /' "$tmp/links.txt"

# the consumer table
"$py" bench/consumer_table.py > "$tmp/table.md" 2> "$tmp/table.err"
ok $? "bench/consumer_table.py runs"
sed -n '/^<!-- consumer-table: begin/,/^<!-- consumer-table: end/p' docs/gpus.md | sed '1d;$d' > "$tmp/doc-table.md"
diff -u "$tmp/table.md" "$tmp/doc-table.md" > "$tmp/table.diff"
ok $? "docs/gpus.md's consumer table is bench/consumer_table.py's output ($(wc -l < "$tmp/doc-table.md") lines)"
[ -s "$tmp/table.diff" ] && sed 's/^/     /' "$tmp/table.diff" | head -20
if [ -n "${QGEN:-}" ]; then
  "$py" bench/consumer_table.py --check-layout "$QGEN" > /dev/null 2> "$tmp/layout.txt"
  ok $? "the script's cache bytes a token are qgen's layout ($(grep -c '^ok' "$tmp/layout.txt") variants)"
  grep -v '^ok' "$tmp/layout.txt" | sed 's/^/     /'
else
  echo "skip: the layout check needs \$QGEN"
fi

# the README's length
n=$(wc -l < README.md)
ok $([ "$n" -le 250 ]; echo $?) "README.md is at most 250 lines ($n)"

# no citations of the notes or of issues by number (as tools/check-records.sh for code)
pat='NOTES\.md|NOTES[[:space:]]+(entr(y|ies)[[:space:]]+)?[0-9]|[Ii]ssues?[[:space:]]+#?[0-9]|(^|[^[:alnum:]_])(PR|[Pp]ull request)[[:space:]]+#?[0-9]|\(#[0-9]+\)'
grep -nE "$pat" $docs > "$tmp/cites.txt"
ok $([ ! -s "$tmp/cites.txt" ]; echo $?) "README.md and docs/ cite no notes or issue numbers"
sed 's/^/     /' "$tmp/cites.txt"

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
