-- expect: n_head / n_head_kv = 128 query heads per KV head is unsupported; allowed: at most 64
return spec{ name = "m", head_dim = 128, n_head = 128, n_head_kv = 1 }
