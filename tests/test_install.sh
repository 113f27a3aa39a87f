#!/usr/bin/env bash
# test_install.sh — `cmake --install` of the build into a scratch prefix, then the example
# (examples/c) built against that installed tree through find_package(qgen), through
# pkg-config, and linked statically from libqgen.a, and each run (GPU, else the CPU); and
# libqgen.so exports exactly the QGEN_API declarations of qgen.h and needs no Lua.
# Env: QGEN_SOURCE_DIR, QGEN_BINARY_DIR (the build to install).
set -u
. "$(dirname "$0")/lib.sh"
command -v pkg-config > /dev/null || { echo "pkg-config not installed"; exit 77; }
p=$tmp/prefix
cmake --install "$QGEN_BINARY_DIR" --prefix "$p" > "$tmp/install.log" 2>&1
ok $? "cmake --install into a scratch prefix"
for f in bin/qgen include/qgen.h lib/libqgen.so lib/libqgen.a lib/cmake/qgen/qgenConfig.cmake \
         lib/cmake/qgen/qgenConfigVersion.cmake lib/pkgconfig/qgen.pc; do
  [ -e "$p/$f" ]; ok $? "installed $f"
done
so=$(readlink -f "$p/lib/libqgen.so")
readelf -d "$so" | grep -q "SONAME.*\[libqgen\.so\.0\]"; ok $? "SONAME is libqgen.so.0 ($(basename "$so"))"
nm -D --defined-only "$so" | awk '{print $3}' | sort > "$tmp/exported"
grep -o 'QGEN_API [^(]*(' runtime/qgen.h | grep -o 'qgen_[a-z_0-9]*($' | tr -d '(' | sort > "$tmp/declared"
diff "$tmp/declared" "$tmp/exported" > "$tmp/sym.diff"
ok $? "libqgen.so exports exactly qgen.h's $(wc -l < "$tmp/declared") QGEN_API functions$(sed 's/^/ /' "$tmp/sym.diff" | tr '\n' ' ')"
! readelf -d "$so" | grep -Eq "lua|TEXTREL"; ok $? "libqgen.so needs no Lua and has no text relocations"

cmake -S examples/c -B "$tmp/ex-cmake" -DCMAKE_PREFIX_PATH="$p" > "$tmp/ex-cmake.log" 2>&1 &&
  cmake --build "$tmp/ex-cmake" >> "$tmp/ex-cmake.log" 2>&1
ok $? "the example builds through find_package(qgen)"
mkdir "$tmp/ex-pc" && cp examples/c/example.c examples/c/Makefile "$tmp/ex-pc"
PKG_CONFIG_PATH="$p/lib/pkgconfig" make -C "$tmp/ex-pc" > "$tmp/ex-pc.log" 2>&1
ok $? "the example builds through pkg-config --cflags --libs qgen"
static_libs=$(PKG_CONFIG_PATH="$p/lib/pkgconfig" pkg-config --static --libs qgen | sed 's/-lqgen/-l:libqgen.a/')
cc -O2 -I"$p/include" -o "$tmp/ex-static" examples/c/example.c $static_libs -lm > "$tmp/ex-static.log" 2>&1
ok $? "the example links statically from libqgen.a"
for exe in "$tmp/ex-cmake/example" "$tmp/ex-pc/example" "$tmp/ex-static"; do
  "$exe" > "$tmp/run.log" 2>&1
  ok $([ $? = 0 ] && grep -q "max |sparse - dense| = .* 0 over every page" "$tmp/run.log"; echo $?) \
    "$(basename "$(dirname "$exe")")/$(basename "$exe") runs: $(tail -1 "$tmp/run.log")"
done
! ldd "$tmp/ex-static" | grep -q libqgen; ok $? "the static build does not load libqgen.so"
finish
