-- expect: :5: instruction limit exceeded
-- a few instructions, each shifting a million entries: the shifts count as instructions
local t = {}
for i = 1, 1000000 do t[i] = i end
while true do table.insert(t, 1, 0); table.remove(t, 1) end
