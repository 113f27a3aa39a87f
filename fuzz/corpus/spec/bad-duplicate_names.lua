-- expect: variant 2: name = "m" is already used by variant 1
return {
  { name = "m", head_dim = 128, n_head = 32, n_head_kv = 8 },
  { name = "m", head_dim = 128, n_head = 32, n_head_kv = 8, k_type = "q8_0" },
}
