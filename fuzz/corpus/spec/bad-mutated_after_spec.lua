-- expect: :3: head_dim = 100 is not a multiple of 32
-- changes made after spec{} are validated too (and reported at the spec{} line)
local s = spec{ name = "m", head_dim = 128, n_head = 32, n_head_kv = 8 }
s.head_dim = 100
return s
