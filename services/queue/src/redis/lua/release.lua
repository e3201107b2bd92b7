-- ARGV: tenant, id, consumer, delivered, delay (ms). Parks a held entry until
-- the delay is over; it stays pending, so its delivery count goes on.
local t, id, consumer, delivered, delay = ARGV[3], ARGV[4], ARGV[5], ARGV[6], tonumber(ARGV[7])
if not holds(t, id, consumer, delivered) then
  return 0
end
park(t, id, now_ms() + delay)
return 1
