-- kv-pairs.lua — the GPU check's coverage of cache and io types: every (k_type, v_type)
-- pair of {f16, q8_0, q4_0, q5_0} on one GQA shape, plus bf16 caches with bf16 inputs and
-- output, f32 inputs/output and mixed quantized types on shapes the model specs do not have
-- (head_dim 96, 64 and 32, group 3, 5 and 7, blocks 32, 128 and 256), and sparse-V
-- (sparse.v_tau: the check's reference skips in the GPU's sub-tile order) on q4_0 and on an
-- f16 K with a q5_0 V and two m-tiles of heads (group 20), and attend's swapped operands
-- (groups 1, 2, 3, 5, 8, and 9 past them). Run by tests/gpu-run.sh and test_gpu; not a model.
local types = { "f16", "q8_0", "q4_0", "q5_0" }
local variants = {}
for _, k in ipairs(types) do
  for _, v in ipairs(types) do
    variants[#variants + 1] = spec{
      name = "pair-" .. k .. "-" .. v,
      head_dim = 128, n_head = 8, n_head_kv = 2,
      k_type = k, v_type = v,
      sparse = { block = 64, coverage = 0.25 },
      archs = { "sm_90" },
    }
  end
end
variants[#variants + 1] = spec{
  name = "bf16-io-bf16", head_dim = 96, n_head = 12, n_head_kv = 4,
  k_type = "bf16", v_type = "bf16", in_type = "bf16", out_type = "bf16",
  sparse = { block = 32, coverage = 0.25 }, archs = { "sm_90" },
}
variants[#variants + 1] = spec{
  name = "f32-io-q5-bf16", head_dim = 64, n_head = 10, n_head_kv = 2,
  k_type = "q5_0", v_type = "bf16", in_type = "f32", out_type = "f32",
  sparse = { block = 128, coverage = 0.25 }, archs = { "sm_90" },
}
variants[#variants + 1] = spec{
  name = "vtau-q4_0", head_dim = 128, n_head = 8, n_head_kv = 2,
  k_type = "q4_0", v_type = "q4_0",
  sparse = { block = 64, coverage = 0.25, v_tau = 0.01 }, archs = { "sm_90" },
}
variants[#variants + 1] = spec{
  name = "vtau-f16-q5_0-g20", head_dim = 64, n_head = 40, n_head_kv = 2,
  k_type = "f16", v_type = "q5_0",
  sparse = { block = 32, coverage = 0.25, v_tau = 0.001 }, archs = { "sm_90" },
}
variants[#variants + 1] = spec{
  name = "blk256-q8_0-q5_0-g7", head_dim = 32, n_head = 14, n_head_kv = 2,
  k_type = "q8_0", v_type = "q5_0",
  sparse = { block = 256, coverage = 0.25 }, archs = { "sm_90" },
}
-- attend's swapped operands (block-quantized K and V, groups of at most 8) on the groups,
-- head_dims, io types and blocks the model specs do not have, and the first group past them
local swapped = {
  { "q4_0", "q4_0", 256, 4, 4, 32, "f16", "f16" },
  { "q8_0", "q4_0", 64, 8, 4, 128, "f16", "f16" },
  { "q5_0", "q5_0", 96, 6, 2, 64, "bf16", "bf16" },
  { "q4_0", "q8_0", 160, 10, 2, 64, "f16", "f16" },
  { "q8_0", "q8_0", 128, 16, 2, 64, "f32", "f32" },
  { "q5_0", "q8_0", 64, 9, 1, 64, "f16", "f16" },
}
for _, c in ipairs(swapped) do
  variants[#variants + 1] = spec{
    name = string.format("swap-%s-%s-d%d-g%d", c[1], c[2], c[3], c[4] // c[5]),
    head_dim = c[3], n_head = c[4], n_head_kv = c[5],
    k_type = c[1], v_type = c[2], in_type = c[7], out_type = c[8],
    sparse = { block = c[6], coverage = 0.25 }, archs = { "sm_90" },
  }
end
return variants
