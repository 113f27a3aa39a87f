-- expect: in_type = "q8_0" is not an input/output type; allowed: f32, f16, bf16
return spec{ name = "m", head_dim = 128, n_head = 32, n_head_kv = 8, in_type = "q8_0" }
