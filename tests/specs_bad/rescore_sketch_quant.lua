-- expect: sparse\.rescore\.sketch = "q4_0" is set with k_type = "q5_0"; allowed: no sketch on a quantized cache
return spec{ name = "m", head_dim = 128, n_head = 32, n_head_kv = 8, k_type = "q5_0",
  sparse = { rescore = { candidates = 4, sketch = "q4_0" } } }
