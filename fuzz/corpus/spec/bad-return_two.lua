-- expect: the spec returned 2 values
return spec{ name = "m", head_dim = 128, n_head = 32, n_head_kv = 8 }, spec{ name = "m2", head_dim = 64, n_head = 8, n_head_kv = 8 }
