-- Llama 3.1 8B (meta-llama/Llama-3.1-8B, config.json): num_attention_heads = 32,
-- num_key_value_heads = 8, hidden_size = 4096 -> head_dim = 128, 4 query heads per
-- KV head.
return spec{
  name = "llama-3.1-8b",
  head_dim = 128,
  n_head = 32,
  n_head_kv = 8,
  sparse = { block = 64, coverage = 0.25 },
  archs = { "sm_80", "sm_90" },
}
