# device call 4: call 2 (the merge kernel's same-call A/B and GPU checks), then on the same
# machine the one-token step with its splits merged by qg_combine (QGEN_TUNE merge=1) against
# the default (attend's last CTA), f16, 16K/128K/512K, B1/B4, dense/25 %/6.25 %, two rounds,
# into $R/one/, and qgen check of qwen3-4b and its q4_0 variant under merge=1.
bash experiments/2026-12-06-merge-cost/call2.sh
. experiments/2026-12-06-verify-cost/head.sh
O=$R/one; mkdir -p $O
one() { # TAG TUNE ROUND
  env QGEN_CACHE_DIR=/tmp/qc-b QGEN_TUNE=$2 timeout 100 .carry/b/qgen bench --spec specs/qwen3-4b.lua --variant qwen3-4b --ctx 16K,128K,512K \
    --batch 1,4 --coverage 1,0.25,0.0625 --runs 20 --warmup 5 --json $O/$1-$3.json > $O/$1-$3.log 2>&1 || echo "$1 $3 failed: $(tail -2 $O/$1-$3.log)"
}
for round in 1 2; do one base "" $round; one merge1 merge=1 $round; done
python3 experiments/2026-12-06-merge-cost/summary.py $O > $O/summary.txt; sed -n '1,/^$/p' $O/summary.txt; elapsed; pack
for v in qwen3-4b qwen3-4b-q4_0; do
  QGEN_CACHE_DIR=/tmp/qc-b QGEN_TUNE=merge=1 timeout 100 .carry/b/qgen check --spec specs/qwen3-4b.lua --variant $v --quick > $O/check-merge1-$v.log 2>&1
  echo "check merge=1 $v rc $? $(tail -1 $O/check-merge1-$v.log)"
done
elapsed; pack
