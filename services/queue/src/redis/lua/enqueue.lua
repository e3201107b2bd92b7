-- ARGV: tenant, proposal[, tenant, proposal, ...]: one pair per entry, in
-- order. Returns how many were added (a proposal queued already is skipped).
local added = 0
-- Tenants whose stream, group and registry entries this call has made sure of.
local ready = {}
for i = 3, #ARGV - 1, 2 do
  local t, proposal = ARGV[i], ARGV[i + 1]
  if redis.call('HEXISTS', ids_key(t), proposal) == 0 then
    local s = stream_key(t)
    if not ready[t] then
      -- Creates the stream with its group; BUSYGROUP (it exists) is fine.
      redis.pcall('XGROUP', 'CREATE', s, group, '0', 'MKSTREAM')
      redis.call('ZADD', tenants_key, 0, t)
      redis.call('SADD', streams_key, t)
      ready[t] = true
    end
    local id = redis.call('XADD', s, '*', 'proposal', proposal)
    redis.call('HSET', ids_key(t), proposal, id)
    added = added + 1
  end
end
return added
