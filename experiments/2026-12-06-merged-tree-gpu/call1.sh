# device call 1: the merged tree's GPU tests (C tests on the GPU backend, pytest, quick specs)
set -u
t0=$(date +%s); el() { echo "  [$1 at $(($(date +%s) - t0)) s]"; }
B=.carry/b; R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/gpu.txt
export QGEN_CACHE_DIR=/tmp/qgen-cache QGEN_TEMPLATE_DIR=$PWD/templates QGEN_SOURCE_DIR=$PWD
pip install -q --no-index --find-links .whl pytest > /dev/null 2>&1; python3 -c "import pytest; print('pytest', pytest.__version__)"
QGEN_TEST_BACKEND=gpu timeout 150 $B/tests/test_api > $R/test-api-gpu.log 2>&1; echo "test_api gpu rc $? $(tail -1 $R/test-api-gpu.log)"; el api
( QGEN_TEST_BACKEND=gpu timeout 120 $B/tests/test_soak 20000 > $R/test-soak-gpu.log 2>&1; echo "test_soak gpu rc $? $(tail -1 $R/test-soak-gpu.log)"
  QGEN_TEST_BACKEND=gpu timeout 60 $B/tests/test_threads > $R/test-threads-gpu.log 2>&1; echo "test_threads gpu rc $? $(tail -1 $R/test-threads-gpu.log)"; el soak ) &
( for t in test_views test_fp8 test_bundle test_gpu; do QGEN_TEST_BACKEND=gpu timeout 120 $B/tests/$t > $R/$t-gpu.log 2>&1; echo "$t rc $? $(tail -1 $R/$t-gpu.log)"; done; el ctests ) &
( QGEN_LIBRARY=$PWD/$B/libqgen.so PYTHONPATH=$PWD/python timeout 330 python3 -m pytest -q -rs -p no:cacheprovider python/tests > $R/pytest-gpu.log 2>&1; echo "pytest rc $?"; tail -3 $R/pytest-gpu.log; el pytest ) &
( timeout 330 bash tests/gpu-run.sh $B $R quick specs > /dev/null 2>&1; echo "specs rc $? PASS $(grep -c PASS $R/gpu-check-specs.log) FAIL $(grep -c FAIL $R/gpu-check-specs.log)"; el specs ) &
wait; el all
