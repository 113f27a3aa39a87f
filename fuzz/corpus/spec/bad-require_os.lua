-- expect: :2: 'require' is not available in a spec
local os = require("os")
