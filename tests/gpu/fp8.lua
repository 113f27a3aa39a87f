-- fp8.lua — the GPU check's coverage of the fp8 cache types (e4m3, e5m2): every ordered
-- (k_type, v_type) pair of {e4m3, e5m2} with {f16, q8_0, q4_0} (both orders) and
-- e4m3/e4m3, e5m2/e5m2, e4m3/e5m2; each of them both dense and sparse, over groups 1, 4
-- and 7, head_dim 64, 128 and 256 and f32 / bf16 inputs (cycled over the pairs: each fp8
-- type, as K and as V, meets every group, head_dim and input type). `qgen check` sets
-- per-tensor scales != 1 on every fp8 cache. Run by tests/gpu-run.sh and test_gpu; not a
-- model.
local fp8 = { "e4m3", "e5m2" }
local other = { "f16", "q8_0", "q4_0" }
local pairs_ = {}
for _, f in ipairs(fp8) do
  for _, o in ipairs(other) do
    pairs_[#pairs_ + 1] = { f, o }
    pairs_[#pairs_ + 1] = { o, f }
  end
end
pairs_[#pairs_ + 1] = { "e4m3", "e4m3" }
pairs_[#pairs_ + 1] = { "e5m2", "e5m2" }
pairs_[#pairs_ + 1] = { "e4m3", "e5m2" }

local groups, dims, ins = { 1, 4, 7 }, { 64, 128, 256 }, { "f32", "bf16" }
local variants = {}
for i, p in ipairs(pairs_) do
  for _, sparse in ipairs({ false, true }) do
    local n = #variants
    local g, d, it = groups[n % 3 + 1], dims[(n // 3) % 3 + 1], ins[n % 2 + 1]
    variants[#variants + 1] = spec{
      name = "fp8-" .. p[1] .. "-" .. p[2] .. (sparse and "-sparse" or "-dense"),
      head_dim = d, n_head = 2 * g, n_head_kv = 2,
      k_type = p[1], v_type = p[2], in_type = it, out_type = it,
      sparse = sparse and { block = 64, coverage = 0.25 } or nil,
      archs = { "sm_90" }, -- sm_80's paths: tests/gpu-run.sh's sm_80 bundle of specs/qwen3-4b-fp8.lua
    }
  end
end
return variants
