-- expect: (instruction|time) limit exceeded
-- pcall cannot swallow the limit: once it trips, every instruction raises again
while true do pcall(function() while true do end end) end
