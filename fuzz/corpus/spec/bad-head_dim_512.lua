-- expect: head_dim = 512 is out of range; allowed: a multiple of 32 in 32\.\.256
return spec{ name = "m", head_dim = 512, n_head = 32, n_head_kv = 8 }
