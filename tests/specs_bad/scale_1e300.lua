-- expect: scale = 1e\+300 is too large; allowed: a number > 0, a normal f32
return spec{ name = "m", head_dim = 128, n_head = 32, n_head_kv = 8, scale = 1e300 }
