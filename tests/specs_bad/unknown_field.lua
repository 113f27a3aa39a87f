-- expect: :4: unknown field 'head_dims' \(did you mean 'head_dim'\?\)
-- a typo in a field name is an error, never silently ignored
return spec{
  name = "m", head_dims = 128, n_head = 32, n_head_kv = 8,
}
