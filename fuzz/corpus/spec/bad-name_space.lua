-- expect: name = "qwen 3" contains ' ' at position 5
return spec{ name = "qwen 3", head_dim = 128, n_head = 32, n_head_kv = 8 }
