-- Gemma 3 4B (google/gemma-3-4b-it, config.json, text_config): num_attention_heads = 8,
-- num_key_value_heads = 4, head_dim = 256 -> 2 query heads per KV head.
-- Gemma scales scores by query_pre_attn_scalar ^ -0.5 rather than head_dim ^ -0.5;
-- query_pre_attn_scalar = 256 here, so the scale is 1/16 (which is also the default
-- 1/sqrt(head_dim), written out because it comes from a different field).
local query_pre_attn_scalar = 256
return spec{
  name = "gemma-3-4b",
  head_dim = 256,
  n_head = 8,
  n_head_kv = 4,
  scale = 1 / math.sqrt(query_pre_attn_scalar),
  sparse = { block = 64, coverage = 0.25 },
  archs = { "sm_80", "sm_90" },
}
