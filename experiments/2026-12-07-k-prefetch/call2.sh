# device call 2 of E90: call1.sh for the second form (the next stage waited for at the step's
# start, the load branch-free; its templates in .carry/tkpf), the A/B of q4_0 and q5_0 only.
AB="qwen3-4b-q4_0 qwen3-4b-q5_0" bash experiments/2026-12-07-k-prefetch/call1.sh
