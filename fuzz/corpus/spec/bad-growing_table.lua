-- expect: memory limit exceeded
local t = {}
while true do t[#t + 1] = { #t } end
