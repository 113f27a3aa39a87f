# head.sh — what the device calls of this experiment (call2.sh, call3.sh, call5.sh) and later ones share (later
# ones: the A/B cells ab_cell and ab_summary, at the end); sourced
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
# ab_cell VARIANT TAG ROUND COVERAGES [VAR=VALUE...]: one round of one side of a same-call A/B
# (the later experiments' calls): qgen bench of VARIANT at 128K/512K x B1/B4 x COVERAGES x
# T = 1, 8 (AB_CTX, AB_BATCH, AB_TOKENS set others; AB_SPEC another spec file) under the environment given
# (QGEN_TUNE=..., QGEN_TEMPLATE_DIR=...; none: the build's default), a kernel cache a tag,
# into $R/VARIANT/TAG-ROUND.json (and .log).
ab_cell() {
  local v=$1 tag=$2 rnd=$3 cov=$4
  shift 4
  mkdir -p $R/$v
  env QGEN_CACHE_DIR=/tmp/qc-ab-$tag "$@" timeout 100 $B/qgen bench --spec ${AB_SPEC:-specs/qwen3-4b.lua} --variant $v --ctx ${AB_CTX:-128K,512K} \
    --batch ${AB_BATCH:-1,4} --coverage $cov --tokens ${AB_TOKENS:-1,8} --runs 20 --warmup 5 --json $R/$v/$tag-$rnd.json > $R/$v/$tag-$rnd.log 2>&1 ||
    echo "$v $tag $rnd failed: $(tail -n 2 $R/$v/$tag-$rnd.log)"
}
# ab_summary VARIANT...: each one's A/B table (merge-cost's summary.py), kept as
# $R/VARIANT/summary.txt and printed; then the time and the results packed.
ab_summary() {
  local v
  for v in "$@"; do
    python3 experiments/2026-12-06-merge-cost/summary.py $R/$v > $R/$v/summary.txt
    echo "== $v"
    cat $R/$v/summary.txt
  done
  elapsed
  pack
}
