-- expect: 'setmetatable' is not available in a spec
-- no user metatables: a __gc finalizer would run with the instruction hook off
setmetatable({}, { __gc = function() while true do end end })
