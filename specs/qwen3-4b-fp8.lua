-- Qwen3-4B (as specs/qwen3-4b.lua) with an FP8 KV cache, as vLLM stores it
-- (kv_cache_dtype "fp8" / "fp8_e5m2"): qwen3-4b-e4m3 and qwen3-4b-e5m2. The per-layer
-- k_scale / v_scale are runtime values of each layer's cache (qgen_cache_set_scales), not
-- part of the spec. A file of its own so that qwen3-4b.lua's variants stay as they are;
-- bench/run.sh takes qwen3-4b-e4m3 into the grid.
local function variant(kv)
  return spec{
    name = "qwen3-4b-" .. kv,
    head_dim = 128,
    n_head = 32,
    n_head_kv = 8,
    k_type = kv,
    v_type = kv,
    sparse = { block = 64, coverage = 0.25, sink = 64, recent = 256 },
    archs = { "sm_80", "sm_90" },
  }
end

return { variant "e4m3", variant "e5m2" }
