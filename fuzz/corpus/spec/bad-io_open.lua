-- expect: :2: 'io' is not available in a spec
local f = io.open("/etc/passwd")
return f:read("a")
