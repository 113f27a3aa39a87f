-- expect: instruction limit exceeded .*infinite loop
-- few instructions, each a slow library call: what it allocates counts as instructions
for i = 1, 1e9 do
  local s = string.rep("x", 30000000)
end
