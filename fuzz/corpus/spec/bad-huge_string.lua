-- expect: memory limit exceeded
return string.rep("x", 2^30)
