#!/usr/bin/env bash
# test_cache_cli.sh — the kernel cache as `qgen emit` uses it: concurrent processes on one
# directory, entries reproducible byte for byte, a corrupted entry rebuilt, an unwritable
# directory, `qgen cache` (list's columns, what clear removes and what it leaves), and a
# directory others may write, which is not used.
# Env: QGEN (the binary), QGEN_SOURCE_DIR.
set -u
. "$(dirname "$0")/lib.sh"
spec=specs/qwen2.5-0.5b.lua

"$QGEN" emit --spec $spec --arch sm_90 > "$tmp/a.txt" 2>&1 & pa=$!
"$QGEN" emit --spec $spec --arch sm_90 > "$tmp/b.txt" 2>&1 & pb=$!
wait $pa; ra=$?; wait $pb; rb=$?
ok $([ $ra = 0 ] && [ $rb = 0 ]; echo $?) "two concurrent emits into one empty cache both succeed"
"$QGEN" cache list > "$tmp/list.txt"
n=$(grep -c "\.qgc$" "$tmp/list.txt"); bad=$(grep -c corrupt "$tmp/list.txt")
ok $([ "$n" = 1 ] && [ "$bad" = 0 ]; echo $?) "one valid entry afterwards ($n entries, $bad corrupt)"
ok $([ -z "$(ls "$tmp/cache" | grep -v '\.qgc$')" ]; echo $?) "no temporary files left behind"
ok $(head -1 "$tmp/list.txt" | grep -q "bytes *status *spec *entry" && grep -Eq "^ +[0-9]+  ok +qwen2\.5-0\.5b +d64_.*\.qgc$" "$tmp/list.txt" &&
  tail -1 "$tmp/list.txt" | grep -q "^1 entry, [0-9]* bytes in $tmp/cache$"; echo $?) \
  "cache list: a header, the spec that wrote each entry, the entry's name, then the total"

entry=$(ls "$tmp/cache"/*.qgc)
QGEN_CACHE_DIR="$tmp/cache2" "$QGEN" emit --spec $spec --arch sm_90 > /dev/null 2>&1
ok $(cmp -s "$entry" "$tmp/cache2/${entry##*/}"; echo $?) "a compile into another empty cache gives the same entry, byte for byte"
size=$(stat -c %s "$entry")
truncate -s $((size / 2)) "$entry"
"$QGEN" emit --spec $spec --arch sm_90 > "$tmp/c.txt" 2>&1
ok $([ $? = 0 ] && grep -q " miss$" "$tmp/c.txt"; echo $?) "a truncated entry is a miss and is rebuilt"
"$QGEN" cache list | grep -q "ok"; ok $? "the rebuilt entry verifies"
printf '\x01' | dd of="$entry" bs=1 seek=$((size - 100)) conv=notrunc 2>/dev/null
"$QGEN" emit --spec $spec --arch sm_90 > "$tmp/d.txt" 2>&1
ok $([ $? = 0 ] && grep -q " miss$" "$tmp/d.txt"; echo $?) "a bit-flipped entry is a miss and is rebuilt"
"$QGEN" emit --spec $spec --arch sm_90 > "$tmp/e.txt" 2>&1
ok $([ $? = 0 ] && ! grep -q " miss$" "$tmp/e.txt"; echo $?) "then it hits again"

QGEN_CACHE_DIR=/dev/null/qgen "$QGEN" emit --spec $spec --arch sm_90 > "$tmp/f.txt" 2>"$tmp/f.err"
w=$(grep -c "warning" "$tmp/f.err")
ok $([ $? = 0 ] && [ "$w" = 1 ]; echo $?) "an unwritable cache directory: emit works, one warning ($w)"
QGEN_CACHE=off "$QGEN" cache path | grep -q "memory only"; ok $? "QGEN_CACHE=off: memory only"
"$QGEN" cache path | grep -q "$tmp/cache"; ok $? "qgen cache path names the directory"
# a project folder used as the cache: clear removes the entries only, names the rest
printf 'my thesis\n' > "$tmp/cache/thesis.qgc"
printf 'chapter one\n' > "$tmp/cache/chapter1.qgc.tmp.bak"
printf 'not an entry\n' > "$tmp/cache/draft-0123456789abcdef.qgc"
touch -d '2 hours ago' "$tmp/cache/chapter1.qgc.tmp.bak" "$tmp/cache/thesis.qgc"
"$QGEN" cache clear > "$tmp/clear.txt"
ok $(grep -q "removed 1 entry" "$tmp/clear.txt" && grep -q "^  thesis.qgc$" "$tmp/clear.txt" &&
  grep -q "^  chapter1.qgc.tmp.bak$" "$tmp/clear.txt" && grep -q "^  draft-0123456789abcdef.qgc$" "$tmp/clear.txt"; echo $?) \
  "qgen cache clear removes the entry and names the 3 files it leaves"
ok $([ "$(ls "$tmp/cache" | sort | tr '\n' ' ')" = "chapter1.qgc.tmp.bak draft-0123456789abcdef.qgc thesis.qgc " ] &&
  [ "$(cat "$tmp/cache/thesis.qgc")" = "my thesis" ] && [ "$(cat "$tmp/cache/chapter1.qgc.tmp.bak")" = "chapter one" ]; echo $?) \
  "... which are there afterwards, untouched"
rm "$tmp/cache"/*

# a cache directory its group or others may write: not used, and said so
(umask 002 && mkdir "$tmp/shared")
QGEN_CACHE_DIR="$tmp/shared" "$QGEN" emit --spec $spec --arch sm_90 > "$tmp/g.txt" 2> "$tmp/g.err"; rc=$?
ok $([ $rc = 0 ] && [ "$(grep -c "writable by its group (mode 0775).*chmod go-w $tmp/shared" "$tmp/g.err")" = 1 ] &&
  [ -z "$(ls "$tmp/shared")" ]; echo $?) "emit with a group-writable cache directory: works from memory, one warning (chmod go-w)"
QGEN_CACHE_DIR="$tmp/shared" "$QGEN" cache list > /dev/null 2> "$tmp/g.err"; rc=$?
ok $([ $rc = 1 ] && grep -q "chmod go-w" "$tmp/g.err"; echo $?) "cache list on it: exit 1, says what to chmod"
chmod go-w "$tmp/shared"
QGEN_CACHE_DIR="$tmp/shared" "$QGEN" emit --spec $spec --arch sm_90 > /dev/null 2> "$tmp/g.err"
ok $([ ! -s "$tmp/g.err" ] && [ -n "$(ls "$tmp/shared")" ]; echo $?) "after chmod go-w it is used"
(umask 000 && QGEN_CACHE_DIR="$tmp/made/by/qgen" "$QGEN" cache list > /dev/null 2>&1)
ok $([ "$(stat -c %a "$tmp/made/by/qgen")" = 755 ]; echo $?) "a directory qgen makes is 0755 whatever the umask"
"$QGEN" cache bogus > /dev/null 2>&1; ok $([ $? = 1 ]; echo $?) "an unknown cache action exits 1"
finish
