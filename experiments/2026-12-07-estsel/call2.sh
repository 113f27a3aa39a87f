# device call 2 of E92 (carry .carry/b and .carry/told, from old-templates.sh): does the
# default step move? Select's code generic over its shape and estimate's share arguments
# change the default qg_select and qg_estimate SASS (same instruction count for select, 8
# more for estimate; attend and append identical, by cuobjdump on sm_90). Two rounds of
# base (this build) against old (4d3077b's templates), f16 and q4_0, 16K/128K/512K x B1/B4
# x 25 %/6.25 %, one-token steps.
. experiments/2026-12-06-verify-cost/head.sh
B=.carry/b
export AB_CTX=16K,128K,512K AB_BATCH=1,4 AB_TOKENS=1
for round in 1 2; do
  for v in qwen3-4b qwen3-4b-q4_0; do
    ab_cell $v base $round 0.25,0.0625
    ab_cell $v old $round 0.25,0.0625 QGEN_TEMPLATE_DIR=.carry/told
  done
  echo "round $round $(elapsed)"; pack
done
ab_summary qwen3-4b qwen3-4b-q4_0
