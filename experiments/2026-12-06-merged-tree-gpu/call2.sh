# device call 2: test_api on the GPU with a backtrace on abort; test_soak alone; then emulation (sm_86/89/120), tests/gpu specs, pytest under sm_86, in parallel
set -u
t0=$(date +%s); el() { echo "  [$1 at $(($(date +%s) - t0)) s]"; }
B=.carry/b; R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/gpu.txt
export QGEN_CACHE_DIR=/tmp/qgen-cache QGEN_TEMPLATE_DIR=$PWD/templates QGEN_SOURCE_DIR=$PWD
pip install -q --no-index --find-links .whl pytest > /dev/null 2>&1
QGEN_TEST_BACKEND=gpu LD_PRELOAD=$PWD/.carry/abrt.so timeout 150 $B/tests/test_api > $R/test-api-gpu.log 2>&1; echo "test_api gpu rc $?"; grep -v "^ok" $R/test-api-gpu.log | tail -40; el api
QGEN_TEST_BACKEND=gpu timeout 120 $B/tests/test_soak 20000 > $R/test-soak-gpu.log 2>&1; echo "test_soak gpu alone rc $? $(tail -1 $R/test-soak-gpu.log)"; el soak
( EMULATE_JOBS=8 timeout 330 bash tests/gpu-run.sh $B $R quick emulate > /dev/null 2>&1; echo "emulate rc $? PASS $(grep -c PASS $R/gpu-check-emulate.log) FAIL $(grep -c FAIL $R/gpu-check-emulate.log)"; el emulate ) &
( timeout 420 bash tests/gpu-run.sh $B $R quick gpu-specs > /dev/null 2>&1; echo "gpu-specs rc $? PASS $(grep -c PASS $R/gpu-check-gpu-specs.log) FAIL $(grep -c FAIL $R/gpu-check-gpu-specs.log)"; grep FAIL $R/gpu-check-gpu-specs.log | head -5; el gpu-specs ) &
( QGEN_EMULATE=sm_86 QGEN_LIBRARY=$PWD/$B/libqgen.so PYTHONPATH=$PWD/python timeout 400 python3 -m pytest -q -rs -p no:cacheprovider python/tests > $R/pytest-sm_86.log 2>&1; echo "pytest sm_86 rc $?"; tail -2 $R/pytest-sm_86.log; el pytest ) &
wait; el all
