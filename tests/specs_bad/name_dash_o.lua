-- expect: name = "-o" starts with '-'; allowed: .*the first a letter or digit
return spec{ name = "-o", head_dim = 128, n_head = 32, n_head_kv = 8 }
