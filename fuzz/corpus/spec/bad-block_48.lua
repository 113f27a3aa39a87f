-- expect: sparse\.block = 48 is not a multiple of 32
return spec{ name = "m", head_dim = 128, n_head = 32, n_head_kv = 8, sparse = { block = 48 } }
