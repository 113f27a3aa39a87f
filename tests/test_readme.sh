#!/usr/bin/env bash
# test_readme.sh — README.md's shell and Python blocks that need no GPU, run in order in one
# bash session as a reader pastes them (so a venv activated by one block is the python3 of
# the next), each line's exit status checked.
#
# Every ```sh and ```python block carries a marker on the line before it:
#   <!-- readme-test: run -->           run it here
#   <!-- readme-test: skip, REASON -->  not here (a GPU, a download, the suite itself)
# A block without one fails the test, so a new block is never silently untested.
#
# Where it runs: a scratch folder that links the source tree's files, with copies of python/
# and examples/ (blocks write into them) and `build` linked to this build ($QGEN_BINARY_DIR),
# and HOME a scratch folder too (~/.local, the kernel cache, pip's cache). Two commands are
# stood in for, because ctest runs inside what they make: `cmake -S . -B build` and
# `cmake --build build` do nothing (the build is this one, which CI makes with those very
# lines), and `apt-get install` checks that the packages it names are installed (the test
# skips, exit 77, naming any that are not). A block that runs qgen.run needs gguf in
# build/pylib and the fetched model (what command 2 makes), `qgen emit` needs NVRTC: without
# them that block is skipped and says why.
# Env: QGEN_SOURCE_DIR, QGEN_BINARY_DIR (the build), QGEN_MODEL_DIR (default ~/.cache/qgen/models).
set -u
src=${QGEN_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
bin=${QGEN_BINARY_DIR:-$src/build}
readme=$src/README.md
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ -x "$bin/qgen" ] || { echo "no built qgen in $bin"; exit 77; }

# ---- the blocks: tmp/blocks/N.{sh,py} and a table "N kind action line reason"
mkdir -p "$tmp/blocks"
awk -v dir="$tmp/blocks" '
  /^<!-- readme-test:/ { mark = $0; next }
  inblock && /^```[[:space:]]*$/ { inblock = 0; close(file); next }
  inblock { print > file; next }
  /^```(sh|python)[[:space:]]*$/ {
    kind = ($0 ~ /python/) ? "py" : "sh"; n++
    file = dir "/" n "." kind; printf "" > file; inblock = 1
    action = "none"
    if (mark ~ /readme-test: run -->/) action = "run"
    else if (mark ~ /readme-test: skip/) {
      action = "skip"; why = mark
      sub(/^<!-- readme-test: skip,? */, "", why); sub(/ *-->$/, "", why)
      print why > (dir "/" n ".why"); close(dir "/" n ".why")
    }
    print n, kind, action, NR > (dir "/index")
    mark = ""; next
  }
  /^[[:space:]]*$/ { next }
  { mark = "" }
' "$readme"
pass=0 fail=0
ok() { if [ "$1" = 0 ]; then pass=$((pass + 1)); echo "ok   $2"; else fail=$((fail + 1)); echo "FAIL $2"; fi; }

unmarked=$(awk '$3 == "none" {print "README.md:" $4}' "$tmp/blocks/index")
ok $([ -z "$unmarked" ]; echo $?) "every sh and python block is marked run or skip${unmarked:+ (unmarked: $(echo $unmarked))}"

# ---- packages named by the blocks that run
missing=""
for n in $(awk '$3 == "run" && $2 == "sh" {print $1}' "$tmp/blocks/index"); do
  for p in $(sed -n 's/.*apt-get install -y \([^&|;#]*\).*/\1/p' "$tmp/blocks/$n.sh"); do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
  done
done
if [ -n "$missing" ]; then
  echo "skip: the README's blocks install packages this machine lacks:$missing"
  exit 77
fi

# ---- the scratch tree and the stand-ins
w=$tmp/w
mkdir -p "$w" "$tmp/home" "$tmp/shim"
for f in "$src"/* "$src"/.[!.]*; do
  b=${f##*/}
  case $b in build* | .git | .venv | out | python | examples | install) continue ;; esac
  ln -s "$f" "$w/$b"
done
(cd "$src" && tar cf - --exclude=build --exclude='*.egg-info' --exclude=__pycache__ --exclude=example \
  --exclude='build-*' python examples) | (cd "$w" && tar xf -)
ln -s "$bin" "$w/build"
real_cmake=$(command -v cmake)
cat > "$tmp/shim/cmake" <<EOF
#!/usr/bin/env bash
# the README's configure and build of ./build: this build already is that (see test_readme.sh)
if { [ "\$1" = -S ] && [ "\$2" = . ] && [ "\$3" = -B ] && [ "\$4" = build ]; } || { [ "\$1" = --build ] && [ "\$2" = build ]; }; then
  echo "(readme test: cmake \$* stands for the build under test, $bin)"; exit 0
fi
exec "$real_cmake" "\$@"
EOF
cat > "$tmp/shim/apt-get" <<'EOF'
#!/usr/bin/env bash
# the packages were checked before the blocks ran (see test_readme.sh)
echo "(readme test: apt-get $* stood in for)"
EOF
chmod +x "$tmp/shim/cmake" "$tmp/shim/apt-get"

models=${QGEN_MODEL_DIR:-$HOME/.cache/qgen/models}
nvrtc=$("$bin/qgen" version 2>&1 | awk '/^nvrtc/ {print $2}')

# ---- one bash session: each run block's lines, each followed by a check of its status
script=$tmp/session.sh
{
  echo 'cd "$W" || exit 2'
  while read -r n kind action line; do
    case $action in
      skip) echo "echo 'skip README.md:$line: $(sed "s/'//g" "$tmp/blocks/$n.why" 2>/dev/null)'"; continue ;;
      run) ;;
      *) continue ;;
    esac
    if grep -q "qgen.run" "$tmp/blocks/$n.$kind" && { [ ! -d "$bin/pylib/gguf" ] || ! ls "$models"/SmolLM2-*.gguf > /dev/null 2>&1; }; then
      echo "echo 'skip README.md:$line: no gguf in build/pylib or no fetched smollm2 in $models (command 2 makes both)'"
      continue
    fi
    if grep -q "qgen emit" "$tmp/blocks/$n.$kind" && [ "$nvrtc" = none ]; then
      echo "echo 'skip README.md:$line: qgen emit needs NVRTC, which this machine lacks'"
      continue
    fi
    echo "echo '---- README.md:$line ($kind)'"
    if [ "$kind" = py ]; then
      echo "python3 '$tmp/blocks/$n.py'; rc=\$?; [ \$rc = 0 ] || { echo 'FAIL README.md:$line: the python block exits '\$rc; exit 1; }"
    else
      # lines joined at a trailing backslash; each command line as pasted, then its status
      awk '/\\$/ { sub(/\\$/, ""); acc = acc $0; next } { print acc $0; acc = "" }' "$tmp/blocks/$n.sh" |
        grep -vE '^[[:space:]]*(#|$)' > "$tmp/blocks/$n.cmds"
      i=0
      while IFS= read -r cmd; do
        i=$((i + 1))
        printf '%s\n' "$cmd"
        printf 'rc=$?; [ $rc = 0 ] || { echo "FAIL README.md:%s: command %s of the block exits $rc"; exit 1; }\n' "$line" "$n.$i"
      done < "$tmp/blocks/$n.cmds"
    fi
  done < "$tmp/blocks/index"
  echo 'echo "all blocks ran"'
} > "$script"

t0=$(date +%s)
env -u QGEN_CACHE_DIR -u XDG_CACHE_HOME -u QGEN_LIBRARY -u PYTHONPATH -u VIRTUAL_ENV \
  HOME="$tmp/home" QGEN_MODEL_DIR="$models" W="$w" PATH="$tmp/shim:$PATH" PIP_DISABLE_PIP_VERSION_CHECK=1 \
  bash "$script" > "$tmp/session.log" 2>&1
rc=$?
ok $([ $rc = 0 ] && grep -q "^all blocks ran$" "$tmp/session.log"; echo $?) \
  "the README's blocks run as pasted ($(grep -c '^---- ' "$tmp/session.log") blocks ran, $(grep -c '^skip ' "$tmp/session.log") skipped, $(($(date +%s) - t0)) s)"
grep -E '^(---- |skip |FAIL )' "$tmp/session.log" | sed 's/^/     /'
if [ $rc != 0 ]; then
  tail -40 "$tmp/session.log"
  f=$(sed -n 's/^FAIL README.md:[0-9]*: command \([0-9]*\)\.\([0-9]*\) .*/\1 \2/p' "$tmp/session.log")
  [ -n "$f" ] && echo "     the command: $(sed -n "${f#* }p" "$tmp/blocks/${f% *}.cmds")"
fi

# what the blocks claim, checked in their output
grep -qE "^niah_single +8K .* quest +4 +2 +1\.000" "$tmp/session.log"
ok $? "command 1's eval: Quest finds every needle at 8K (niah_single, 2 trials)"
grep -q "max |sparse - dense| = .* 0 over every page" "$tmp/session.log"
ok $? "the C example built with pkg-config and the run path runs: sparse over every page equals dense"

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
