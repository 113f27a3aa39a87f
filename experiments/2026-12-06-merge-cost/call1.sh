# device call 1 (its inputs from prep1.sh): where a verify step's extra time goes (HEAD 8f99090, qwen3-4b f16): the same
# binary with template variants (QGEN_TEMPLATE_DIR, timing only: their outputs are wrong) —
# nocomb: the last CTA's merge of the splits returns at once; noq: engine modules skip
# loading the query (rows zero) — and 8f99090 with the partials' rows uncapped (.carry/rows)
# at QGEN_TUNE ctas=3 (the engine attend's registers for 3 CTAs an SM). 16K/128K/512K,
# B1/B4, dense/6.25 %, T = 1, 4, 8, two rounds. Results into $OUT/r.tgz.
. experiments/2026-12-06-verify-cost/head.sh
# cell TAG BIN TEMPLATES TUNE ROUND
cell() {
  env QGEN_CACHE_DIR=/tmp/qc-$1 ${3:+QGEN_TEMPLATE_DIR=$PWD/$3} ${4:+QGEN_TUNE=$4} timeout 150 $2 bench --spec specs/qwen3-4b.lua \
    --variant qwen3-4b --ctx 16K,128K,512K --batch 1,4 --coverage 1,0.0625 --tokens 1,4,8 --runs 20 --warmup 5 \
    --json $R/$1-$5.json > $R/$1-$5.log 2>&1 || echo "$1 $5 failed: $(tail -2 $R/$1-$5.log)"
  echo "$1 round $5 $(elapsed)"
}
for round in 1 2; do
  cell base .carry/b/qgen "" "" $round
  cell nocomb .carry/b/qgen .carry/tpl/nocomb "" $round
  cell noq .carry/b/qgen .carry/tpl/noq "" $round
  cell ctas3 .carry/rows/qgen "" ctas=3 $round
  pack
done
elapsed; pack
