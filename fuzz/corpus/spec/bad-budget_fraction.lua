-- expect: sparse\.budget = 2048\.5 is not an integer
return spec{ name = "m", head_dim = 128, n_head = 32, n_head_kv = 8, sparse = { budget = 2048.5 } }
