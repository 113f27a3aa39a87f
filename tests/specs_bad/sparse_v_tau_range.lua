-- expect: sparse\.v_tau = 1\.5 is out of range; allowed: a number in \[0, 1\], the sparse-V weight threshold
return spec{ name = "m", head_dim = 128, n_head = 32, n_head_kv = 8, sparse = { v_tau = 1.5 } }
