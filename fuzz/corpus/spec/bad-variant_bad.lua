-- expect: variant 2 \("b"\): head_dim = 48 is not a multiple of 32
return {
  { name = "a", head_dim = 128, n_head = 32, n_head_kv = 8 },
  { name = "b", head_dim = 48, n_head = 32, n_head_kv = 8 },
}
