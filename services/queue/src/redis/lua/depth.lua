-- Entries not yet acked or dead-lettered, over all tenants: the stream keeps
-- undelivered and pending entries (parked ones included) until they go.
local n = 0
for _, t in ipairs(redis.call('ZRANGE', tenants_key, 0, -1)) do
  n = n + redis.call('XLEN', stream_key(t))
end
return n
