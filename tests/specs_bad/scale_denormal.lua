-- expect: scale = 4\.94065645841247e-324 is below the smallest normal f32
return spec{ name = "m", head_dim = 128, n_head = 32, n_head_kv = 8, scale = 5e-324 }
