-- expect: sparse\.sink = -1 is out of range; allowed: an integer number of tokens >= 0
return spec{ name = "m", head_dim = 128, n_head = 32, n_head_kv = 8, sparse = { sink = -1 } }
