-- expect: unknown field 'sparse\.blok' \(did you mean 'sparse\.block'\?\)
return spec{ name = "m", head_dim = 128, n_head = 32, n_head_kv = 8, sparse = { blok = 64 } }
