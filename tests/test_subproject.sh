#!/usr/bin/env bash
# test_subproject.sh — qgen under add_subdirectory() of a parent project: the parent links
# qgen::qgen into the example and runs it; qgen's tests are not built there (QGEN_BUILD_TESTS
# is off below the top level).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/CMakeLists.txt" <<CM
cmake_minimum_required(VERSION 3.18)
project(parent LANGUAGES C)
add_subdirectory("$src" qgen)
add_executable(parent_example "$src/examples/c/example.c")
target_link_libraries(parent_example PRIVATE qgen::qgen m)
CM
cmake -S "$tmp" -B "$tmp/build" -DCMAKE_BUILD_TYPE=Release > "$tmp/cfg.log"
if cmake --build "$tmp/build" --target help | grep -q test_api; then
  echo "FAIL qgen's tests are targets of the parent project"; exit 1
fi
cmake --build "$tmp/build" --target parent_example -j"$(nproc)" > "$tmp/build.log"
"$tmp/build/parent_example" | tail -1
echo "ok   add_subdirectory(qgen): the parent's example builds and runs"
