-- expect: missing required field 'name'
return spec{ head_dim = 128, n_head = 32, n_head_kv = 8 }
