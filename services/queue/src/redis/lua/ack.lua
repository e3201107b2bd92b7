-- ARGV: then (tenant, id, consumer, delivered, proposal) per lease.
-- Removes each entry whose lease is still the current one; returns how many.
local acked = 0
for i = 3, #ARGV, 5 do
  local t, id = ARGV[i], ARGV[i + 1]
  if holds(t, id, ARGV[i + 2], ARGV[i + 3]) then
    remove(t, id, ARGV[i + 4], nil)
    acked = acked + 1
  end
end
return acked
