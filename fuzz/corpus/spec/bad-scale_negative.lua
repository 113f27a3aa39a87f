-- expect: scale = -0\.125 is not positive
return spec{ name = "m", head_dim = 128, n_head = 32, n_head_kv = 8, scale = -0.125 }
