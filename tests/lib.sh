# lib.sh — sourced by the shell tests (test_emit, test_cache_cli, test_cache_stress):
# skips (77) without $QGEN, works from $QGEN_SOURCE_DIR, gives a scratch directory $tmp
# (removed on exit) with its own kernel cache, and counts results: `ok STATUS TEXT` per
# check, `finish` last (prints the totals, fails when any check failed).
[ -n "${QGEN:-}" ] || { echo "QGEN not set"; exit 77; }
cd "$QGEN_SOURCE_DIR" || exit 1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export QGEN_CACHE_DIR="$tmp/cache"
pass=0 fail=0
ok() { if [ "$1" = 0 ]; then pass=$((pass + 1)); echo "ok   $2"; else fail=$((fail + 1)); echo "FAIL $2"; fi; }
finish() {
  echo "$pass passed, $fail failed"
  [ "$fail" = 0 ]
}
