# device call 2: the engine modules (steps of several query tokens, windows, sinks) on the GPU:
# test_api alone, then qgen check --quick of every spec (its new "steps" lines) natively beside
# the transformers tests (verify steps, Gemma 3 and gpt-oss shapes, left padding) on both backends.
set -u
t0=$(date +%s); el() { echo "  [$1 at $(($(date +%s) - t0)) s]"; }
B=.carry/b; R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/gpu.txt
export QGEN_CACHE_DIR=/tmp/qgen-cache QGEN_TEMPLATE_DIR=$PWD/templates QGEN_SOURCE_DIR=$PWD
QGEN_TEST_BACKEND=gpu LD_PRELOAD=$PWD/.carry/abrt.so timeout 150 $B/tests/test_api > $R/test-api-gpu.log 2>&1
echo "test_api gpu rc $? ok $(grep -c '^ok' $R/test-api-gpu.log)"; grep -v "^ok" $R/test-api-gpu.log | tail -25; el api
ck() { local tag=$1; shift; timeout 300 "$@" > $R/check-$tag.log 2>&1; echo "$tag rc $? PASS $(grep -c PASS $R/check-$tag.log) FAIL $(grep -c FAIL $R/check-$tag.log)"; grep "FAIL\|steps" $R/check-$tag.log | grep -v PASS | head -6; grep "steps" $R/check-$tag.log | head -8; }
pip install -q --no-index --find-links .whl pytest > /dev/null 2>&1
( QGEN_LIBRARY=$PWD/$B/libqgen.so PYTHONPATH=$PWD/python timeout 330 python3 -m pytest -q -rs -s -p no:cacheprovider python/tests/test_transformers.py > $R/pytest-transformers.log 2>&1; echo "pytest rc $?"; grep "qgen dense vs\|passed\|failed\|Error" $R/pytest-transformers.log | tail -30; el pytest ) &
ck qwen3 $B/qgen check --spec specs/qwen3-4b.lua --quick; el qwen3
for f in specs/*.lua tests/gpu/*.lua; do n=$(basename $f .lua); [ $n = qwen3-4b ] && continue; ck $n $B/qgen check --spec $f --quick & done; wait; el specs
grep -h "steps" $R/check-*.log | sort | uniq -c | sort -rn | head -40
