-- expect: head_dim = 128\.5 is not an integer
return spec{ name = "m", head_dim = 128.5, n_head = 32, n_head_kv = 8 }
