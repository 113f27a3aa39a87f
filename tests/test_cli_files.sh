#!/usr/bin/env bash
# test_cli_files.sh — what `qgen emit -o` and `qgen bundle -o` write, and what they never
# touch: a device node, a FIFO, a symbolic link or a directory at the target is refused
# (exit 1, naming it and what it is) and left as it was, before anything is compiled; a
# kill -9 in the middle leaves no partial file under the target's name; a full disk is a
# clear error (exit 3, the code of a failed write) that keeps the old output file and the
# old cache entry valid, and so is standard output redirected to a full disk; `qgen cache
# clear` on a read-only directory says why. The device node and the file system checks need
# root (mknod, mount) and are skipped without it.
# Env: QGEN (the binary), QGEN_SOURCE_DIR.
set -u
. "$(dirname "$0")/lib.sh"
spec=specs/qwen2.5-0.5b.lua
mounts=()
trap 'for m in "${mounts[@]}"; do umount "$m"; done; rm -rf "$tmp"' EXIT
root=$([ "$(id -u)" = 0 ] && echo 1 || echo 0)
# mount_tmpfs DIR SIZE: a small file system of our own (root only); 1 when it cannot
mount_tmpfs() {
  mkdir -p "$1" && [ $root = 1 ] && mount -t tmpfs -o "size=$2" tmpfs "$1" 2>/dev/null && mounts+=("$1")
}

# ---- targets that are not regular files ------------------------------------------------
echo keep > "$tmp/target"
mkfifo "$tmp/fifo"
ln -s "$tmp/target" "$tmp/link"
kinds=("fifo:FIFO:-p" "link:symbolic link:-L")
if [ $root = 1 ] && mknod "$tmp/dev" c 1 3 2>/dev/null; then kinds+=("dev:character device:-c"); else echo "skip the device node (needs root)"; fi
for k in "${kinds[@]}"; do
  name=${k%%:*} rest=${k#*:}; what=${rest%:*} test=${rest##*:}
  timeout 60 "$QGEN" bundle --spec $spec --arch sm_90 -o "$tmp/$name" > "$tmp/out.txt" 2>"$tmp/err.txt"; rc=$?
  ok $([ $rc = 1 ] && grep -q "$tmp/$name: not replaced: it is a $what" "$tmp/err.txt" && [ $test "$tmp/$name" ] &&
    ! grep -q "cubin" "$tmp/out.txt"; echo $?) "bundle -o a $what: exit 1 naming it, left as it was, nothing compiled"
done
ok $([ "$(cat "$tmp/target")" = keep ]; echo $?) "the symbolic link's target is untouched"
mkdir "$tmp/dir"
timeout 60 "$QGEN" bundle --spec $spec --arch sm_90 -o "$tmp/dir" > /dev/null 2>&1
ok $([ $? = 0 ] && [ -f "$tmp/dir/qwen2.5-0.5b.qgb" ]; echo $?) "bundle -o an existing directory writes DIR/<variant>.qgb (as documented)"

# emit -o DIR: every file it will write is checked before anything is compiled
"$QGEN" emit --spec $spec --arch sm_90 -o "$tmp/emit" > /dev/null 2>&1
ok $? "emit -o DIR"
cu=$(ls "$tmp/emit"/*.cu)
rm "$cu"; ln -s "$tmp/target" "$cu"
rm -rf "$tmp/cache"
"$QGEN" emit --spec $spec --arch sm_90 -o "$tmp/emit" > "$tmp/out.txt" 2>"$tmp/err.txt"; rc=$?
ok $([ $rc = 1 ] && grep -q "not replaced: it is a symbolic link" "$tmp/err.txt" && [ -L "$cu" ] &&
  ! grep -q "module" "$tmp/out.txt" && [ ! -d "$tmp/cache" ]; echo $?) "emit -o DIR with a symbolic link at DIR/<uri>.cu: exit 1 before compiling"
rm "$cu"; mkdir "$cu"
"$QGEN" emit --spec $spec --arch sm_90 -o "$tmp/emit" > /dev/null 2>"$tmp/err.txt"
ok $([ $? = 1 ] && grep -q "it is a directory" "$tmp/err.txt"; echo $?) "emit -o DIR with a directory at DIR/<uri>.cu: exit 1"
rmdir "$cu"

# ---- kill -9 in the middle: nothing partial under the target's name ---------------------
partial=0
for delay in 0.3 0.8 1.5 2.5 4; do
  rm -rf "$tmp/kcache" "$tmp/k.qgb"
  QGEN_CACHE_DIR="$tmp/kcache" "$QGEN" bundle --spec $spec --arch sm_80,sm_90 -o "$tmp/k.qgb" > /dev/null 2>&1 & pid=$!
  sleep $delay; kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
  # the target is absent or whole (every checksum verifies); anything else is a temp file
  if [ -e "$tmp/k.qgb" ] && ! "$QGEN" info "$tmp/k.qgb" > /dev/null 2>&1; then partial=$((partial + 1)); fi
  for f in "$tmp"/k.qgb* "$tmp"/kcache/*; do
    [ -e "$f" ] || continue
    case "$f" in *.tmp.*) ;; *.qgc) QGEN_CACHE_DIR="$tmp/kcache" "$QGEN" cache list | grep -q "ok .*${f##*/}$" || partial=$((partial + 1)) ;;
      "$tmp/k.qgb") ;; *) partial=$((partial + 1)) ;; esac
  done
done
ok $([ $partial = 0 ]; echo $?) "kill -9 at 5 points of bundle: no partial bundle or cache entry under its name ($partial)"
QGEN_CACHE_DIR="$tmp/kcache" "$QGEN" bundle --spec $spec --arch sm_80,sm_90 -o "$tmp/k.qgb" > /dev/null 2>&1 &&
  "$QGEN" info "$tmp/k.qgb" > /dev/null
ok $? "a later run succeeds over what the killed ones left"
QGEN_CACHE_DIR="$tmp/kcache" "$QGEN" cache clear > /dev/null
ok $([ -z "$(ls -A "$tmp/kcache" | grep '\.tmp\.')" ]; echo $?) "qgen cache clear removes the killed writers' temp files"

# ---- a full disk ------------------------------------------------------------------------
if mount_tmpfs "$tmp/full" 3m; then
  cp "$tmp/dir/qwen2.5-0.5b.qgb" "$tmp/full/b.qgb"
  dd if=/dev/zero of="$tmp/full/filler" bs=64k 2>/dev/null # until the disk is full
  "$QGEN" bundle --spec $spec --arch sm_80,sm_90 -o "$tmp/full/b.qgb" > /dev/null 2>"$tmp/err.txt"; rc=$?
  ok $([ $rc = 3 ] && grep -q "b.qgb: cannot write: No space left on device" "$tmp/err.txt"; echo $?) "bundle on a full disk: exit 3, says so"
  ok $(cmp -s "$tmp/full/b.qgb" "$tmp/dir/qwen2.5-0.5b.qgb" && "$QGEN" info "$tmp/full/b.qgb" > /dev/null &&
    [ -z "$(ls "$tmp/full" | grep '\.tmp\.')" ]; echo $?) "... the old bundle is intact and no temp file is left"
  "$QGEN" info --lua "$tmp/dir/qwen2.5-0.5b.qgb" > "$tmp/full/spec.lua" 2>"$tmp/err.txt"; rc=$?
  ok $([ $rc = 3 ] && grep -q "cannot write to standard output: No space left on device" "$tmp/err.txt"; echo $?) \
    "info --lua B > a file on a full disk: exit 3 with the reason (exit $rc)"
  "$QGEN" emit --spec $spec --arch sm_90 -o "$tmp/full/emit" > /dev/null 2>"$tmp/err.txt"; rc=$?
  ok $([ $rc = 3 ] && grep -q "cannot write: No space left on device" "$tmp/err.txt"; echo $?) \
    "emit -o a directory on a full disk: exit 3 with the reason (exit $rc)"
  rm -rf "$tmp/full/filler" "$tmp/full/b.qgb" "$tmp/full/spec.lua" "$tmp/full/emit"
  QGEN_CACHE_DIR="$tmp/full/cache" "$QGEN" emit --spec $spec --arch sm_90 > /dev/null 2>&1
  dd if=/dev/zero of="$tmp/full/filler" bs=64k 2>/dev/null
  QGEN_CACHE_DIR="$tmp/full/cache" "$QGEN" emit --spec $spec --arch sm_80 > "$tmp/out.txt" 2>"$tmp/err.txt"; rc=$?
  ok $([ $rc = 0 ] && grep -q "warning: kernel cache: .*cannot write: No space left on device; caching in memory only" "$tmp/err.txt"; echo $?) \
    "emit with the cache on a full disk: works, one warning with the reason"
  QGEN_CACHE_DIR="$tmp/full/cache" "$QGEN" cache list > "$tmp/list.txt"
  ok $([ "$(grep -c 'ok ' "$tmp/list.txt")" = 1 ] && [ "$(ls "$tmp/full/cache" | wc -l)" = 1 ]; echo $?) \
    "... the old cache entry still verifies, no temp file left"
  QGEN_CACHE_DIR="$tmp/full/cache" "$QGEN" emit --spec $spec --arch sm_90 > "$tmp/out.txt" 2>&1
  ok $([ $? = 0 ] && grep -q "module .* hit$" "$tmp/out.txt"; echo $?) "... and hits"

  # a read-only cache directory: clear says why, exit 1; emit -o into it fails before compiling
  mount -o remount,ro "$tmp/full"
  QGEN_CACHE_DIR="$tmp/full/cache" "$QGEN" cache clear > /dev/null 2>"$tmp/err.txt"; rc=$?
  ok $([ $rc = 1 ] && grep -q "cannot clear: Read-only file system" "$tmp/err.txt"; echo $?) "cache clear on a read-only directory: exit 1 with the reason"
  rm -rf "$tmp/cache"
  "$QGEN" emit --spec $spec --arch sm_90 -o "$tmp/full/cache" > "$tmp/out.txt" 2>"$tmp/err.txt"; rc=$?
  ok $([ $rc = 1 ] && grep -q "Read-only file system" "$tmp/err.txt" && [ ! -d "$tmp/cache" ]; echo $?) \
    "emit -o an unwritable directory: exit 1 before compiling"
else
  echo "skip the full and read-only disk checks (need root and mount)"
fi
finish
