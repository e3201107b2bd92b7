-- ARGV: tenant, id, consumer, delivered, by (ms). Returns 1 if the lease was
-- still held (and now runs `by` from now), 0 otherwise.
local t, id, consumer, delivered, by = ARGV[3], ARGV[4], ARGV[5], ARGV[6], tonumber(ARGV[7])
if not holds(t, id, consumer, delivered) then
  return 0
end
local now = now_ms()
-- Same owner, JUSTID: the delivery count stays, the idle time restarts.
redis.call('XCLAIM', stream_key(t), group, consumer, 0, id, 'JUSTID')
redis.call('ZADD', leased_key(t), now + by, id)
redis.call('ZADD', consumers_key, now, consumer)
return 1
