-- expect: archs\[1\] = "sm_75" is not supported: qgen kernels need sm_80 or newer
return spec{ name = "m", head_dim = 128, n_head = 32, n_head_kv = 8, archs = { "sm_75" } }
