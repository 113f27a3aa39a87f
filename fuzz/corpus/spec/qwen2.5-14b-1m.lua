-- Qwen2.5-14B-Instruct-1M (Qwen/Qwen2.5-14B-Instruct-1M, config.json):
-- num_attention_heads = 40, num_key_value_heads = 8, hidden_size = 5120
-- -> head_dim = 5120 / 40 = 128, 5 query heads per KV head (a group that is not a
-- power of two). A 1M-token context is where a quantized KV cache pays off, so this
-- file returns three variants that differ only in the cache type; pick one by name
-- (qwen2.5-14b-1m, qwen2.5-14b-1m-q8_0, qwen2.5-14b-1m-q4_0).
local function variant(kv)
  return spec{
    name = kv == "f16" and "qwen2.5-14b-1m" or "qwen2.5-14b-1m-" .. kv,
    head_dim = 5120 // 40,
    n_head = 40,
    n_head_kv = 8,
    k_type = kv,
    v_type = kv,
    sparse = { block = 64, coverage = 0.25 },
    archs = { "sm_80", "sm_90" },
  }
end

local variants = {}
for _, kv in ipairs { "f16", "q8_0", "q4_0" } do
  variants[#variants + 1] = variant(kv)
end
return variants
