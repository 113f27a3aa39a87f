-- expect: :5: instruction limit exceeded
-- a few instructions around a slow library call: the comparisons count as instructions
local t = {}
for i = 1, 500000 do t[i] = (i * 7919) % 1000003 end
while true do table.sort(t) end
