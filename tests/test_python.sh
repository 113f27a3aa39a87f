#!/usr/bin/env bash
# test_python.sh — the Python package (python/): its pytest suite against the built
# libqgen.so ($QGEN_LIBRARY), then `pip install` offline (no index, no build isolation:
# Debian's setuptools) into a scratch directory and the suite again against that copy,
# which carries its own libqgen.so; the CPU Python examples of the README ("Try it without a
# GPU") and of docs/accuracy.md pasted as is (tests/readme_python.py; the GPU examples need a
# GPU: experiments/gpu-logs); every bench/*.py compiles (py_compile). Skips (77) without numpy and pytest for $QGEN_PYTHON
# (default /usr/bin/python3); the pip step is skipped without pip.
# qgen.models' tests (python/tests/test_models.py) also need the gguf package: a folder
# $QGEN_PYLIB (default $QGEN_BINARY_DIR/pylib, where .ci/run installs gguf) goes on
# PYTHONPATH for the source-tree run, and the fetched models (python -m qgen.models fetch);
# without them those tests skip and say why.
# Env: QGEN_SOURCE_DIR, QGEN_LIBRARY (the built libqgen.so).
set -u
. "$(dirname "$0")/lib.sh"
py=${QGEN_PYTHON:-/usr/bin/python3}
[ -x "$py" ] || py=python3
pylib=${QGEN_PYLIB:-${QGEN_BINARY_DIR:-build}/pylib}
[ -d "$pylib" ] && export PYTHONPATH="$pylib${PYTHONPATH:+:$PYTHONPATH}"
"$py" -c "import numpy, pytest" 2> /dev/null || { echo "$py has no numpy or pytest"; exit 77; }
"$py" -m pytest -q -p no:cacheprovider python/tests; ok $? "pytest python/tests with QGEN_LIBRARY=$QGEN_LIBRARY"
# the benchmark's scripts run only on a GPU machine (torch, FlashInfer), where a syntax error
# would cost a device call: each at least compiles here (to a scratch cache, nothing written
# beside them)
for f in bench/*.py; do
  PYTHONPYCACHEPREFIX="$tmp/pyc" "$py" -m py_compile "$f"; ok $? "$f compiles"
done
PYTHONPATH=python "$py" tests/readme_python.py README.md "Try it without a GPU" > "$tmp/readme.log" 2>&1; r=$?
ok $r "the README's CPU Python example runs as pasted"; [ $r = 0 ] || cat "$tmp/readme.log"
PYTHONPATH=python "$py" tests/readme_python.py docs/accuracy.md "Random data is the worst case" > "$tmp/accuracy.log" 2>&1; r=$?
ok $([ $r = 0 ] && grep -q "coverage 0.25: relative error vs dense 1.73" "$tmp/accuracy.log"; echo $?) \
  "docs/accuracy.md's random-data example runs as pasted and prints what the page says"; [ $r = 0 ] || cat "$tmp/accuracy.log"
if "$py" -m pip --version > /dev/null 2>&1; then
  "$py" -m pip install -q --no-build-isolation --no-index --no-deps --target "$tmp/site" ./python > "$tmp/pip.log" 2>&1
  ok $? "pip install --no-build-isolation --no-index --target (offline)"
  rm -rf python/build python/qgen.egg-info
  [ -e "$tmp/site/qgen/libqgen.so.0" ]; ok $? "the installed package holds libqgen.so.0"
  (unset QGEN_LIBRARY; cd "$tmp" && QGEN_TEST_INSTALLED=1 PYTHONPATH="$tmp/site" "$py" -m pytest -q -p no:cacheprovider \
    "$QGEN_SOURCE_DIR/python/tests")
  ok $? "pytest against the installed package and its own libqgen.so"
else
  echo "skip: $py has no pip"
fi
finish
