-- bounds-i8.lua — 8-bit page bounds (sparse.bounds = "i8", base/layout.h) on the GPU.
-- The first four variants are Qwen3-4B's shape (specs/qwen3-4b.lua) with f16 and q4_0
-- caches, each with f16 and with 8-bit bounds: `qgen eval` compares the two bounds in one
-- run (they share the shape). The rest cover the estimate and append paths of 8-bit
-- bounds: f16 and q4_0 caches, groups 1, 4, 7 and 16 (two n-tiles), head_dim 64, 128 and
-- 256, f16, f32 and bf16 inputs (an f32/bf16 query is split in two for the mma). Run by
-- tests/gpu-run.sh (`qgen check`); not a model.
local variants = {}
for _, kv in ipairs { "f16", "q4_0" } do
  for _, bounds in ipairs { "f16", "i8" } do
    variants[#variants + 1] = spec{
      name = "qwen3-4b-" .. kv .. "-bounds-" .. bounds,
      head_dim = 128, n_head = 32, n_head_kv = 8,
      k_type = kv, v_type = kv,
      sparse = { block = 64, coverage = 0.25, sink = 64, recent = 256, bounds = bounds },
      archs = { "sm_80", "sm_90" },
    }
  end
end
local shapes = {
  -- head_dim, n_head, n_head_kv, cache, input/output, block
  { 64, 4, 4, "f16", "f32", 64 },
  { 64, 14, 2, "q4_0", "bf16", 32 },
  { 128, 28, 4, "f16", "bf16", 64 },
  { 128, 32, 2, "q4_0", "f16", 128 },
  { 256, 8, 8, "q4_0", "f32", 64 },
  { 256, 16, 4, "f16", "f16", 64 },
  { 256, 7, 1, "f16", "bf16", 32 },
}
for _, s in ipairs(shapes) do
  local d, h, hkv, kv, io, block = s[1], s[2], s[3], s[4], s[5], s[6]
  variants[#variants + 1] = spec{
    name = string.format("i8-d%d-g%d-%s-%s", d, h // hkv, kv, io),
    head_dim = d, n_head = h, n_head_kv = hkv,
    k_type = kv, v_type = kv, in_type = io, out_type = io,
    sparse = { block = block, coverage = 0.25, bounds = "i8" },
    archs = { "sm_90" },
  }
end
return variants
