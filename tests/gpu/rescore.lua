-- rescore.lua — two-stage selection (sparse.rescore) for the GPU check, eval and bench:
-- the Qwen3-4B shape (head_dim 128, 32/8 heads, block 64) with r = 1, 2, 4, 8, 16 over an
-- f16 cache (with its q4_0 sketch) and a q4_0 cache (its own K rescored), then small odd
-- shapes (groups 1, 3, 7; head_dim 64, 256; bf16 and f32 inputs; a q8_0 and a q5_0 K), then
-- the top-p cut (sparse.rescore.top_p) over both caches and one odd shape, at two p.
-- r = 1 is plain Quest (the same module as no rescore). Not a model.
local variants = {}
for _, k in ipairs({ "f16", "q4_0" }) do
  for _, r in ipairs({ 1, 2, 4, 8, 16 }) do
    variants[#variants + 1] = spec{
      name = "qwen3-4b-" .. k .. "-r" .. r,
      head_dim = 128, n_head = 32, n_head_kv = 8, k_type = k, v_type = k,
      sparse = { block = 64, coverage = 0.0625, rescore = { candidates = r } },
      archs = { "sm_90" },
    }
  end
end
local odd = {
  { "g1-d64-bf16", 64, 4, 4, "bf16", "bf16", 32 },
  { "g3-d256-q8", 256, 6, 2, "q8_0", "f16", 64 },
  { "g7-d64-f32in", 64, 14, 2, "f16", "f32", 128 },
  { "g3-d128-q5-bf16in", 128, 12, 4, "q5_0", "bf16", 32 },
  { "g7-d256-bf16", 256, 7, 1, "bf16", "bf16", 64 },
}
for _, o in ipairs(odd) do
  variants[#variants + 1] = spec{
    name = "odd-" .. o[1], head_dim = o[2], n_head = o[3], n_head_kv = o[4],
    k_type = o[5], v_type = o[5] == "bf16" and "bf16" or "q8_0", in_type = o[6], out_type = o[6],
    sparse = { block = o[7], coverage = 0.25, rescore = { candidates = 2 } },
    archs = { "sm_90" },
  }
end
-- p = 0.9 is the eval's and bench's setting; on qgen check's random data the budget's pages
-- hold too little of the candidates' mass for it to shorten a list, so the p = 0.3 variants
-- are the ones whose cut the check compares with the reference (its line counts the cuts).
for _, t in ipairs({ { "qwen3-4b-f16-r4-p0.9", 128, 32, 8, "f16", "f16", 64, 4, 0.9 },
                    { "qwen3-4b-q4_0-r8-p0.9", 128, 32, 8, "q4_0", "f16", 64, 8, 0.9 },
                    { "odd-g3-d64-bf16-r2-p0.9", 64, 6, 2, "bf16", "bf16", 32, 2, 0.9 },
                    { "qwen3-4b-f16-r4-p0.3", 128, 32, 8, "f16", "f16", 64, 4, 0.3 },
                    { "qwen3-4b-q4_0-r2-p0.3", 128, 32, 8, "q4_0", "f16", 64, 2, 0.3 },
                    { "odd-g3-d64-bf16-r2-p0.3", 64, 6, 2, "bf16", "bf16", 32, 2, 0.3 } }) do
  variants[#variants + 1] = spec{
    name = t[1], head_dim = t[2], n_head = t[3], n_head_kv = t[4], k_type = t[5], v_type = t[5], in_type = t[6], out_type = t[6],
    sparse = { block = t[7], coverage = 0.25, rescore = { candidates = t[8], top_p = t[9] } },
    archs = { "sm_90" },
  }
end
return variants
