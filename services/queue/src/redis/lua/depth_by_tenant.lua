-- Returns {{tenant, entries, age of the oldest (ms)}, ...} for every tenant
-- with entries. A stream id starts with the Redis time (ms) it was added at,
-- and an entry keeps its id while it is leased, released or reclaimed.
local now = now_ms()
local out = {}
for _, t in ipairs(redis.call('ZRANGE', tenants_key, 0, -1)) do
  local s = stream_key(t)
  local n = redis.call('XLEN', s)
  if n > 0 then
    local first = redis.call('XRANGE', s, '-', '+', 'COUNT', 1)[1]
    local age = 0
    if first then
      local added = tonumber(string.match(first[1], '^(%d+)-'))
      age = math.max(0, now - added)
    end
    out[#out + 1] = {t, n, age}
  end
end
return out
