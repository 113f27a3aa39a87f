-- expect: sparse\.coverage = 0\.25 and sparse\.budget = 4096 are both set; allowed: at most one
return spec{ name = "m", head_dim = 128, n_head = 32, n_head_kv = 8, sparse = { coverage = 0.25, budget = 4096 } }
