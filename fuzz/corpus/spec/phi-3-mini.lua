-- Phi-3-mini (microsoft/Phi-3-mini-4k-instruct, config.json): num_attention_heads = 32,
-- num_key_value_heads = 32, hidden_size = 3072 -> head_dim = 3072 / 32 = 96, a head
-- size that is a multiple of 32 but not a power of two. Multi-head attention (group 1).
return spec{
  name = "phi-3-mini",
  head_dim = 3072 // 32,
  n_head = 32,
  n_head_kv = 32,
  sparse = { block = 64, coverage = 0.25 },
  archs = { "sm_80", "sm_90" },
}
