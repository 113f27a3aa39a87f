-- expect: :4: memory limit exceeded
-- a memory error caught by pcall, again and again: each try runs a full GC, and those
-- collections count against the memory limit
while true do pcall(string.rep, "x", 2^30) end
