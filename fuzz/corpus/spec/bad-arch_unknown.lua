-- expect: archs\[2\] = "sm_99" is not a known architecture; allowed: sm_80, sm_86
return spec{ name = "m", head_dim = 128, n_head = 32, n_head_kv = 8, archs = { "sm_90", "sm_99" } }
