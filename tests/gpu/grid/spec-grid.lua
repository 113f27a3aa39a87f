-- spec-grid.lua — 32 sparse variants of the shape grid tests/test_spec_grid.sh compiles
-- (head_dim 32..256 x group 1..64 x in_type x K/V type) for a GPU run:
--   qgen check --spec tests/gpu/grid/spec-grid.lua --quick
-- Not under tests/gpu/ itself, so tests/gpu-run.sh does not run it by default. First the
-- large groups whose estimate once needed more than 48 KiB of static shared memory or
-- spilled (fixed, and kept first so they stay fixed), then a spread over the rest of the grid.
local rows = {
  -- head_dim, group, in_type, K/V type, KV heads
  {256, 64, "f16", "f16", 1}, {192, 64, "f16", "f16", 1}, {256, 32, "f32", "f16", 1}, {128, 64, "f32", "f16", 1},
  {128, 32, "f32", "f16", 2}, {224, 48, "f16", "f16", 1}, {128, 64, "f16", "f16", 1}, {256, 32, "f16", "f16", 2},
  {256, 64, "f32", "q8_0", 1}, {256, 64, "bf16", "q4_0", 1}, {256, 48, "bf16", "bf16", 1}, {192, 32, "f32", "q4_0", 2},
  {160, 64, "bf16", "f16", 1}, {96, 64, "f32", "bf16", 1}, {64, 64, "f16", "q8_0", 1}, {32, 64, "f32", "q4_0", 1},
  {224, 16, "f32", "f16", 2}, {128, 16, "bf16", "q8_0", 4}, {64, 32, "bf16", "f16", 2}, {32, 32, "f16", "bf16", 2},
  {256, 8, "f32", "f16", 2}, {192, 7, "bf16", "q4_0", 4}, {160, 5, "f16", "q8_0", 4}, {128, 4, "f32", "bf16", 8},
  {96, 3, "bf16", "q5_0", 8}, {64, 2, "f16", "q8_0", 8}, {32, 1, "f32", "f16", 8}, {256, 1, "bf16", "q8_0", 4},
  {224, 2, "f32", "q5_0", 4}, {32, 8, "bf16", "bf16", 4}, {160, 16, "f16", "q4_0", 2}, {96, 32, "f16", "q5_0", 1},
}
local out = {}
for _, r in ipairs(rows) do
  local d, g, it, kv, nkv = r[1], r[2], r[3], r[4], r[5]
  out[#out + 1] = spec{
    name = ("d%d-g%d-%s-%s"):format(d, g, it, kv),
    head_dim = d, n_head = g * nkv, n_head_kv = nkv,
    in_type = it, k_type = kv,
    sparse = true,
  }
end
return out
