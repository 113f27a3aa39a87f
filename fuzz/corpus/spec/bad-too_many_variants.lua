-- expect: the spec returned 40 variants; allowed: at most 32
local v = {}
for i = 1, 40 do v[i] = { name = "m" .. i, head_dim = 128, n_head = 32, n_head_kv = 8 } end
return v
