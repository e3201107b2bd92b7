-- ARGV: per-tenant limit, orphan idle (ms). Parks entries whose lease ran out
-- (their holder's token becomes void; any fetch may take them), and pending
-- entries idle that long with no lease at all (their records were lost).
-- Returns how many.
local limit, orphan_ms = tonumber(ARGV[3]), tonumber(ARGV[4])
local now = now_ms()
local parked = 0
for _, t in ipairs(redis.call('ZRANGE', tenants_key, 0, -1)) do
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', leased_key(t), '-inf', now, 'LIMIT', 0, limit)) do
    park(t, id, now)
    parked = parked + 1
  end
  local idle = redis.pcall('XPENDING', stream_key(t), group, 'IDLE', orphan_ms, '-', '+', limit)
  if type(idle) == 'table' and idle.err == nil then
    for _, p in ipairs(idle) do
      local id = p[1]
      if not redis.call('ZSCORE', leased_key(t), id) and not redis.call('ZSCORE', parked_key(t), id) then
        park(t, id, now)
        parked = parked + 1
      end
    end
  end
end
return parked
