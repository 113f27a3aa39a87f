-- expect: :7: table\.insert on a table of length [0-9]+; allowed: a length of at most
-- 68 entries give a border #t of 2^62: shifting that many slots would never end
local t = {}
for k = 0, 62 do t[1 << k] = k end
for i = 1, 5 do t[i] = i end
assert(#t > 1 << 40)
table.insert(t, 1, "x")
