#!/usr/bin/env bash
# test_cache_cli.sh — the kernel cache as `qgen emit` uses it: concurrent processes on one
# directory, entries reproducible byte for byte, a corrupted entry rebuilt, an unwritable
# directory, `qgen cache`.
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
"$QGEN" cache clear | grep -q "removed 1"; ok $? "qgen cache clear removes the entry"
ok $([ -z "$(ls "$tmp/cache")" ]; echo $?) "the directory is empty afterwards"
"$QGEN" cache bogus > /dev/null 2>&1; ok $([ $? = 1 ]; echo $?) "an unknown cache action exits 1"
finish
