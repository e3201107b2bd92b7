-- ARGV: ttl (ms). Deletes consumers not seen for the ttl from every
-- tenant's group, but only those that own no pending entry in any of them
-- (XINFO CONSUMERS says pending = 0). Returns how many were forgotten.
local cutoff = now_ms() - tonumber(ARGV[3])
local stale = redis.call('ZRANGEBYSCORE', consumers_key, '-inf', cutoff)
if #stale == 0 then
  return 0
end
local pending, streams = {}, {}
for _, t in ipairs(redis.call('SMEMBERS', streams_key)) do
  local info = redis.pcall('XINFO', 'CONSUMERS', stream_key(t), group)
  if type(info) == 'table' and info.err == nil then
    streams[#streams + 1] = stream_key(t)
    for _, c in ipairs(info) do
      local name, count
      for i = 1, #c, 2 do
        if c[i] == 'name' then name = c[i + 1] elseif c[i] == 'pending' then count = c[i + 1] end
      end
      pending[name] = (pending[name] or 0) + count
    end
  else
    redis.call('SREM', streams_key, t)
  end
end
local forgotten = 0
for _, name in ipairs(stale) do
  if (pending[name] or 0) == 0 then
    for _, s in ipairs(streams) do
      redis.call('XGROUP', 'DELCONSUMER', s, group, name)
    end
    redis.call('ZREM', consumers_key, name)
    forgotten = forgotten + 1
  end
end
return forgotten
