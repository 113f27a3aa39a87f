-- expect: variant 2 is a string; allowed: a spec table
return { { name = "m", head_dim = 128, n_head = 32, n_head_kv = 8 }, "llama" }
