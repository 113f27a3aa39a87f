-- expect: :2: head_dim = 100 is not a multiple of 32
return spec{ name = "m", head_dim = 100, n_head = 32, n_head_kv = 8 }
