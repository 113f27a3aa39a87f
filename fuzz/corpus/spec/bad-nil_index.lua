-- expect: :3: attempt to index a nil value \(local 'cfg'\)
local cfg
return spec{ name = cfg.name }
