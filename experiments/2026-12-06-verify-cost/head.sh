# head.sh — what the device calls of this experiment (call2.sh, call3.sh, call5.sh) and later ones share; sourced
# from the repository root with OUT set: results gather in R=/tmp/o/r (outside the returned
# folder, so that one archive comes back, not every file), pack puts them in $OUT/r.tgz,
# elapsed prints the seconds since sourcing, check_tuned runs qgen check of qwen3-4b's
# variants under a QGEN_TUNE value (a build's binary in $B), and the GPU and driver go to
# $R/gpu.txt.
set -u
t0=$(date +%s)
DEST=$OUT; R=/tmp/o/r; mkdir -p $R
elapsed() { echo "at $(($(date +%s) - t0)) s"; }
pack() { tar czf $DEST/r.tgz -C /tmp/o r; }
check_tuned() { # TUNE VARIANT...: qgen check --quick of each under QGEN_TUNE=TUNE, into $R/check-TUNE-VARIANT.log
  local tune=$1 v
  shift
  for v in "$@"; do
    QGEN_CACHE_DIR=/tmp/qc-$tune QGEN_TUNE=$tune timeout 100 $B/qgen check --spec specs/qwen3-4b.lua --variant $v --quick > $R/check-$tune-$v.log 2>&1
    echo "check $tune $v rc $? $(tail -n 1 $R/check-$tune-$v.log)"
  done
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R/gpu.txt
