-- expect: sparse\.coverage = 0 is out of range; allowed: a number in \(0, 1\]
return spec{ name = "m", head_dim = 128, n_head = 32, n_head_kv = 8, sparse = { coverage = 0 } }
