-- expect: the variant list has the key \[-1\], not a positive integer
return { [-1] = spec{ name = "m", head_dim = 128, n_head = 32, n_head_kv = 8 } }
