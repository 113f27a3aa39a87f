-- Llama 2 7B (meta-llama/Llama-2-7b-hf, config.json): num_attention_heads = 32,
-- num_key_value_heads = 32, hidden_size = 4096 -> head_dim = 128. Multi-head
-- attention: every query head has its own KV head (group 1).
return spec{
  name = "llama-2-7b",
  head_dim = 128,
  n_head = 32,
  n_head_kv = 32,
  sparse = { block = 64, coverage = 0.25 },
  archs = { "sm_80", "sm_90" },
}
