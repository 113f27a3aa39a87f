-- expect: :4: n_head = 30 is not a multiple of n_head_kv = 8$
-- the error names the line of the field, not of the spec{} call
return spec{
  name = "m", head_dim = 128, n_head = 30, n_head_kv = 8,
}
