-- expect: :3: (instruction|time) limit exceeded .*infinite loop
local n = 0
while true do n = n + 1 end
