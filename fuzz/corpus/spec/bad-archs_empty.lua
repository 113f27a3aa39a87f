-- expect: archs = \{\} is empty
return spec{ name = "m", head_dim = 128, n_head = 32, n_head_kv = 8, archs = {} }
