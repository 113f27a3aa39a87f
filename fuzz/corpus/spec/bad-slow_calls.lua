-- expect: time limit exceeded .*infinite loop
-- few instructions, each a slow library call: the wall-clock limit stops it
for i = 1, 1e9 do
  local s = string.rep("x", 30000000)
end
