-- expect: k_type = "q3_k" is not a KV cache type; allowed: f16, bf16, q8_0, q4_0, q5_0
return spec{ name = "m", head_dim = 128, n_head = 32, n_head_kv = 8, k_type = "q3_k" }
