-- expect: scale = 3\.4e\+38 is too large
return spec{ name = "m", head_dim = 128, n_head = 32, n_head_kv = 8, scale = 3.4e38 }
