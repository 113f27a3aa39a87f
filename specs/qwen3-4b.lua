-- Qwen3-4B (Qwen/Qwen3-4B, config.json): num_attention_heads = 32,
-- num_key_value_heads = 8, head_dim = 128 -> 4 query heads per KV head.
-- Quest-style selection over 64-token pages: attend the top 25% of pages plus the
-- first 64 tokens (attention sink) and the last 256. This is docs/spec.md's example.
-- Four variants differ only in the cache type: qwen3-4b (f16), qwen3-4b-q8_0,
-- qwen3-4b-q4_0, qwen3-4b-q5_0 (the first is what qgen_open picks when no variant is named).
local function variant(kv)
  return spec{
    name = kv == "f16" and "qwen3-4b" or "qwen3-4b-" .. kv,
    head_dim = 128,
    n_head = 32,
    n_head_kv = 8,
    k_type = kv,
    v_type = kv,
    sparse = { block = 64, coverage = 0.25, sink = 64, recent = 256 },
    archs = { "sm_80", "sm_90" },
  }
end

return { variant "f16", variant "q8_0", variant "q4_0", variant "q5_0" }
