-- Qwen2.5-0.5B (Qwen/Qwen2.5-0.5B, config.json): num_attention_heads = 14,
-- num_key_value_heads = 2, hidden_size = 896 -> head_dim = 896 / 14 = 64,
-- 7 query heads per KV head.
return spec{
  name = "qwen2.5-0.5b",
  head_dim = 896 // 14,
  n_head = 14,
  n_head_kv = 2,
  sparse = { block = 64, coverage = 0.25 },
  archs = { "sm_80", "sm_90" },
}
