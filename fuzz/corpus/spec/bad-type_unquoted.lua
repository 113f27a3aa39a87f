-- expect: :3: undefined global 'q8_0'
-- forgot the quotes: reading an undefined global is an error, not a silent nil
return spec{ name = "m", head_dim = 128, n_head = 32, n_head_kv = 8, k_type = q8_0 }
