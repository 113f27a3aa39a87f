-- expect: v_type = "e5m2" needs head_dim a multiple of 64 \(its rows, 96 bytes at head_dim = 96, must be a multiple of 64 bytes\)
return spec{ name = "m", head_dim = 96, n_head = 12, n_head_kv = 4, k_type = "f16", v_type = "e5m2" }
