-- expect: the spec returned nothing
local x = 1
