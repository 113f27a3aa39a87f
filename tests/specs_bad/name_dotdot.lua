-- expect: name = "\.\." starts with '\.'
return spec{ name = "..", head_dim = 128, n_head = 32, n_head_kv = 8 }
