-- expect: :3: .*expected
local t = {
  name = "m" head_dim = 128,
}
