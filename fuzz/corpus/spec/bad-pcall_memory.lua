-- expect: (time|instruction) limit exceeded
-- a memory error caught by pcall, again and again: each try runs a full GC
while true do pcall(string.rep, "x", 2^30) end
