-- expect: :3: instruction limit exceeded
-- moving 8M nils allocates nothing, but the elements moved count as instructions
while true do table.move({}, 1, 1 << 23, 1, {}) end
